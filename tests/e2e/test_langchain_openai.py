"""langchain-openai's ``ChatOpenAI`` against the server on the real Qwen2.5-Coder-0.5B-Instruct int4
(slow): ``with_structured_output(PydanticModel)`` with its default method (a ``json_schema``
response format in langchain-openai 1.x) and with ``method="function_calling"`` (the model bound to
one tool, ``tool_choice`` naming it, parallel calls off) both return a valid instance."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from clika_runtime import modelverse
from clika_runtime.server import start_server

pytestmark = pytest.mark.slow

MODEL = "qwen"


class City(BaseModel):
    """A city and the country it is in."""

    name: str = Field(description="The city's name")
    country: str = Field(description="The country the city is in")
    population_millions: float = Field(ge=0, le=100, description="Inhabitants, in millions")


class Verdict(BaseModel):
    """Whether a statement is true."""

    statement: str
    true: bool


@pytest.fixture(scope="module")
def llm(qwen05_gguf):
    from langchain_openai import ChatOpenAI

    from clika_export.api import cached_export

    model = modelverse.load(cached_export(qwen05_gguf, "int4", progress=False))
    with start_server(model, model_id=MODEL) as server:
        yield ChatOpenAI(
            base_url=server.url, api_key="unused", model=MODEL, temperature=0, max_tokens=160, max_retries=0
        )
    model.close()


def test_the_default_method_sends_a_json_schema_and_gets_the_model(llm):
    # What the installed version's default is: the test names it, so a change of default shows here.
    assert _default_method(llm) == "json_schema"
    city = llm.with_structured_output(City).invoke("Tell me about Lyon.")
    assert isinstance(city, City) and city.name
    verdict = llm.with_structured_output(Verdict).invoke("Is Paris the capital of France?")
    assert isinstance(verdict, Verdict)


def test_function_calling_gets_the_model(llm):
    city = llm.with_structured_output(City, method="function_calling").invoke("Tell me about Osaka.")
    assert isinstance(city, City) and city.name
    raw = llm.with_structured_output(Verdict, method="function_calling", include_raw=True).invoke("Hello!")
    assert raw["parsing_error"] is None and isinstance(raw["parsed"], Verdict)
    [call] = raw["raw"].tool_calls
    assert call["name"] == "Verdict"


def _default_method(llm) -> str:
    import inspect

    return inspect.signature(type(llm).with_structured_output).parameters["method"].default
