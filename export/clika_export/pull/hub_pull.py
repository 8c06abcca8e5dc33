"""``hf://`` specs -> exported model folders: list the repository, download and verify, export, record.

Downloads land in ``$CLIKA_CACHE/hub/<OWNER>/<REPO>/<commit>/`` (a GGUF under
``files/``, a safetensors folder under the repository's name), partial files
in ``partial/hub/`` until verified. The spec's name record keeps the source's
sha256 (the export key), each file's sha256 and the commit, so the model
resolves offline and on a runtime-only install, and ``rm`` removes the download.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from clika_export.pull.hub_files import HubError, Listing, download_file, is_offline, list_repository
from clika_export.pull.hub_spec import HubSpec, parse_hub_spec
from clika_export.pull.pulled_export import export_pulled, held_export
from clika_export.readers.hf import folder_sha256
from clika_runtime.store.cache import cache_root
from clika_runtime.store.local_model import LocalModel, ModelError, Say
from clika_runtime.store.names import NameRecord, read_record, safe_download_path, write_record

# The top-level files of a safetensors folder the export reads (weights, config, tokenizer, template).
FOLDER_SUFFIXES = (".safetensors", ".json", ".jinja", ".model", ".txt")


def pull_from_hub(text: str, precision: str, pull: bool, say: Say, progress: bool) -> LocalModel:
    spec = parse_hub_spec(text)
    name = spec.text
    record = read_record(name)
    held = held_export(record.source_sha256, precision, pull) if record is not None else None
    if held is not None:
        return LocalModel(name, held, precision)
    if not pull:
        raise ModelError(
            f"{name} ({precision}) is not pulled yet: run `clika pull {name} --precision {precision}`"
        )
    source = _recorded_source(record)
    if source is None:
        if is_offline():
            raise ModelError(f"{name} was never downloaded and the Hub is offline (HF_HUB_OFFLINE is set)")
        try:
            record, source = _download(spec, say, progress)
        except HubError as exc:
            raise ModelError(str(exc)) from None
        write_record(record)  # before the export, so `rm` finds the download even if the export fails
    return export_pulled(
        name, record.source_sha256, precision, pull, say, progress, fetch=None, source=source
    )


def _recorded_source(record: NameRecord | None) -> Path | None:
    """The download a record names, when it is still complete in the cache."""
    if record is None or not record.downloads:
        return None
    source = safe_download_path(record.downloads[0])
    if source is None or not source.exists():
        return None
    files = record.origin.get("files", {}) if isinstance(record.origin.get("files"), dict) else {}
    folder = source if source.is_dir() else source.parent
    return source if all((folder / Path(p).name).is_file() for p in files) else None


def _download(spec: HubSpec, say: Say, progress: bool) -> tuple[NameRecord, Path]:
    say(f"[1/2] fetch: {spec.text} from the Hub")
    listing = list_repository(spec)
    paths = _wanted(spec, listing)
    cache = cache_root()
    snapshot = Path("hub") / spec.repo_id / listing.commit
    folder = snapshot / ("files" if spec.file else spec.repo_id.split("/")[1])
    hashes = {}
    for path in paths:
        local = folder / (PurePosixPath(path).name if spec.file else path)
        partial = Path("partial") / snapshot / (path.replace("/", "__") + ".part")
        hashes[path] = download_file(spec, listing.commit, path, cache / local, cache / partial, progress)
    source = cache / folder / PurePosixPath(spec.file).name if spec.file else cache / folder
    sha256 = hashes[spec.file] if spec.file else folder_sha256(source)
    origin = {"repo": spec.repo_id, "revision": spec.revision, "commit": listing.commit, "files": hashes}
    downloads = (str(source.relative_to(cache)),)
    return NameRecord(spec.text, sha256, downloads, origin), source


def _wanted(spec: HubSpec, listing: Listing) -> list[str]:
    """The repository files a spec needs: its GGUF, or the safetensors folder's top-level files."""
    if spec.file:
        if spec.file not in listing.files:
            ggufs = [f for f in listing.files if f.lower().endswith(".gguf")]
            has = f"its GGUF files: {', '.join(ggufs)}" if ggufs else "it has no GGUF file"
            raise HubError(f"{spec.text}: {spec.repo_id} at {spec.revision} has no file {spec.file} ({has})")
        return [spec.file]
    top = [f for f in listing.files if "/" not in f and f.endswith(FOLDER_SUFFIXES)]
    if "config.json" not in top or not any(f.endswith(".safetensors") for f in top):
        ggufs = [f for f in listing.files if f.lower().endswith(".gguf")]
        hint = (
            f"; name one of its GGUF files: {', '.join(spec.text + '/' + g for g in ggufs)}" if ggufs else ""
        )
        raise HubError(
            f"{spec.text}: {spec.repo_id} has no safetensors folder (config.json and *.safetensors){hint}"
        )
    return top
