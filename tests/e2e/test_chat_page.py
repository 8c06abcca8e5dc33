"""The chat page at ``/`` in a real headless Chromium (selenium + Debian's chromium and chromium-driver).

The server serves a store of the test's own (Qwen2.5-Coder-0.5B-Instruct
linked from the user's cache when it is exported there, else SmolLM2) and
keeps conversations in a temporary SQLite file. The browser may reach the
server alone: every other host fails to resolve and any proxy use fails.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from store_models import link_export

from clika_runtime.server import build_router, start_server
from clika_runtime.store import ModelError, resolve

pytestmark = pytest.mark.slow

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
if CHROMIUM is None or DRIVER is None:
    pytest.skip(
        "no Chromium here: apt-get install -y chromium chromium-driver (see the README's tests section)",
        allow_module_level=True,
    )

from selenium.common.exceptions import NoAlertPresentException, UnexpectedAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

MODELS = ("qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")
WAIT_S = 300


def _cached_model(smollm2_gguf_factory) -> tuple[str, Path, str]:
    """The first of MODELS exported in the user's cache (SmolLM2 exported now if none is)."""
    from clika_export.api import cached_export, source_sha256

    for name in MODELS:
        try:
            local = resolve(name, pull=False)
        except ModelError:
            continue
        from clika_runtime.store.names import read_record

        return name, local.folder, read_record(name).source_sha256
    gguf = smollm2_gguf_factory()
    sha = source_sha256(gguf)
    return MODELS[1], cached_export(gguf, "int4", progress=False, sha256=sha), sha


@pytest.fixture(scope="module")
def store(tmp_path_factory, request):
    """The test's store (``$CLIKA_CACHE``) holding the chosen model; yields its name."""
    name, folder, sha = _cached_model(lambda: request.getfixturevalue("smollm2_gguf"))
    cache = tmp_path_factory.mktemp("page-store")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CLIKA_CACHE", str(cache))
        link_export(folder, name, sha, cache)
        yield name, cache


@pytest.fixture(scope="module")
def server(store):
    name, cache = store
    router = build_router(default=name, load_options={"threads": 2})
    with start_server(router, conversations=cache / "conversations.db") as running:
        running.model_name = name
        yield running


@pytest.fixture(scope="module")
def browser(server):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1200,800",
        # Nothing but the server: other hosts do not resolve, and a proxy (if anything asked one) is dead.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=127.0.0.1",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    # A prompt the page opens stays open for the test to answer (the default dismisses it).
    options.set_capability("unhandledPromptBehavior", "ignore")
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    yield driver
    driver.quit()


def get_expecting_a_prompt(browser, url: str) -> None:
    """Navigate to a page that asks something: its prompt may open before the page finishes
    loading, which fails the navigation command but leaves the prompt open to be answered."""
    try:
        browser.get(url)
    except UnexpectedAlertPresentException:
        pass


def open_page(browser, server, fragment: str = "") -> None:
    browser.get("about:blank")  # a page of its own: a new fragment alone would not load it again
    browser.get(f"{server.base_url}/{fragment}")
    WebDriverWait(browser, 60).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready")
    )


def replied(browser) -> str:
    """The last assistant message's text, once the reply ended (the Stop button hidden again)."""
    WebDriverWait(browser, WAIT_S).until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, ".message.assistant")
            and not d.find_element(By.ID, "stop").is_displayed()
        )
    )
    return browser.find_elements(By.CSS_SELECTOR, ".message.assistant .content")[-1].text


def ask(browser, text: str, *, temperature: str = "0", max_tokens: str = "48") -> None:
    browser.find_element(By.ID, "toggle-settings").click()
    for field, value in (("temperature", temperature), ("max-tokens", max_tokens)):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    browser.find_element(By.ID, "toggle-settings").click()
    browser.find_element(By.ID, "prompt").send_keys(text)
    browser.find_element(By.ID, "send").click()


def cancelled(server) -> float:
    for line in httpx.get(f"{server.base_url}/metrics").text.splitlines():
        if line.startswith("clika_requests_cancelled_total"):
            return float(line.split()[-1])
    raise AssertionError("the metrics have no clika_requests_cancelled_total")


def test_the_page_asks_the_model_and_shows_its_answer(browser, server):
    open_page(browser, server)
    assert browser.find_element(By.ID, "model").get_attribute("value") == server.model_name
    ask(browser, "What is the capital of France?")
    assert "Paris" in replied(browser)
    stats = browser.find_elements(By.CSS_SELECTOR, ".message.assistant .stats")[-1].text
    assert "tokens/s" in stats and "context" in stats


def test_a_reload_shows_the_conversation_from_the_store(browser, server):
    conversation_id = browser.current_url.rsplit("#", 1)[-1]
    assert conversation_id.startswith("web-")
    browser.refresh()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".message.assistant"))
    assert "Paris" in browser.find_element(By.CSS_SELECTOR, ".message.assistant .content").text
    assert "capital of France" in browser.find_element(By.CSS_SELECTOR, ".message.user").text
    listed = browser.find_elements(By.CSS_SELECTOR, "#conversations .current .open")
    assert [item.get_attribute("data-id") for item in listed] == [conversation_id]
    stored = httpx.get(f"{server.base_url}/api/conversations/{conversation_id}").json()["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant"] and "Paris" in stored[1]["content"]


def test_regenerate_and_edit_and_resend_replace_what_follows(browser, server):
    open_page(browser, server)
    ask(browser, "What is the capital of France?")
    first = replied(browser)
    browser.find_element(By.XPATH, "//article[contains(@class,'assistant')]//button[.='Regenerate']").click()
    assert replied(browser) == first  # greedy: the same reply again, in place of the first
    assert len(browser.find_elements(By.CSS_SELECTOR, ".message")) == 2
    browser.find_element(By.XPATH, "//article[contains(@class,'user')]//button[.='Edit']").click()
    box = browser.find_element(By.ID, "prompt")
    box.clear()
    box.send_keys("What is the capital of Italy?")
    browser.find_element(By.ID, "send").click()
    assert "Rome" in replied(browser)
    assert [m.text.split("\n")[0] for m in browser.find_elements(By.CSS_SELECTOR, ".message h2")] == [
        "YOU",
        "ASSISTANT",
    ]
    conversation_id = browser.current_url.rsplit("#", 1)[-1]
    stored = httpx.get(f"{server.base_url}/api/conversations/{conversation_id}").json()["messages"]
    assert [m["content"] for m in stored][0] == "What is the capital of Italy?" and len(stored) == 2


def test_stop_ends_a_long_reply_and_the_server_counts_it_cancelled(browser, server):
    before = cancelled(server)
    open_page(browser, server)
    ask(browser, "Count from 1 to 5000, one number per line.", temperature="0", max_tokens="4000")
    WebDriverWait(browser, WAIT_S).until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, ".message.assistant .content")
            and d.find_elements(By.CSS_SELECTOR, ".message.assistant .content")[-1].text.strip()
        )
    )
    browser.find_element(By.ID, "stop").click()
    WebDriverWait(browser, 60).until(lambda d: not d.find_element(By.ID, "stop").is_displayed())
    assert browser.find_element(By.ID, "status").text == "Stopped."
    WebDriverWait(browser, 60).until(lambda _d: cancelled(server) > before)
    assert server.backend.load() == {"active": 0, "waiting": 0}


HOSTILE = (
    'Look: <img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script>\n\n'
    "[click me](javascript:window.__pwned=3) or [docs](https://example.org/docs)\n\n"
    "```html\n<img src=x onerror=alert(1)>\n```"
)


def test_a_hostile_reply_renders_as_text_and_runs_nothing(browser, server):
    conversation = [
        {"role": "user", "content": "say something nasty"},
        {"role": "assistant", "content": HOSTILE},
    ]
    stored = httpx.put(f"{server.base_url}/api/conversations/hostile", json={"messages": conversation})
    assert stored.status_code == 200
    open_page(browser, server, "#hostile")
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".message.assistant"))
    reply = browser.find_element(By.CSS_SELECTOR, ".message.assistant .content")
    assert '<img src=x onerror="window.__pwned=1">' in reply.text
    assert "<script>window.__pwned=2</script>" in reply.text
    assert "[click me](javascript:window.__pwned=3)" in reply.text
    assert "<img src=x onerror=alert(1)>" in reply.find_element(By.CSS_SELECTOR, "figure.code code").text
    assert reply.find_elements(By.TAG_NAME, "img") == [] and reply.find_elements(By.TAG_NAME, "script") == []
    links = [a.get_attribute("href") for a in reply.find_elements(By.TAG_NAME, "a")]
    assert links == ["https://example.org/docs"]
    assert browser.execute_script("return window.__pwned === undefined")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018


def test_the_page_loads_with_nothing_but_the_server_reachable_under_a_strict_policy(browser, server):
    page = httpx.get(f"{server.base_url}/")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "<script>" not in page.text  # no inline script: the policy would refuse it anyway
    browser.get_log("performance")  # drop what earlier tests logged
    open_page(browser, server)
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    assert urls and all(url.startswith(server.base_url) for url in urls), urls
    assert browser.find_elements(By.CSS_SELECTOR, "#model option")
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_a_server_with_an_api_key_is_asked_for_it_once_and_behind_cors(browser, store):
    name, cache = store
    router = build_router(load_options={"threads": 2})
    options = {"api_key": "sesame", "cors_origins": ["https://elsewhere.example"]}
    with start_server(router, conversations=cache / "keyed.db", **options) as keyed:
        browser.get("about:blank")
        get_expecting_a_prompt(browser, f"{keyed.base_url}/")  # a new origin (its own port): no key kept yet
        # Polled until the page asks (switch_to.alert raises until then, which until() would not retry).
        prompt = WebDriverWait(browser, 60).until(expected_conditions.alert_is_present())
        prompt.send_keys("sesame")
        prompt.accept()
        WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
        assert browser.find_element(By.ID, "model").get_attribute("value") == name
        assert browser.execute_script("return localStorage.getItem('clika.apiKey')") == "sesame"
        open_page(browser, keyed)  # the kept key: no second question
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
        assert httpx.get(f"{keyed.base_url}/v1/models").status_code == 401
        browser.execute_script("localStorage.removeItem('clika.apiKey')")
