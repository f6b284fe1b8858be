"""The dictionaries of a run directory (``dictionaries/<name>/``, SAELens's layout) or of
any SAELens folder, each with where it reads and writes."""

from __future__ import annotations

from pathlib import Path

from mechscope.dictionaries import Dictionary, load_dictionary
from mechscope.dictionaries.layouts.saelens import CFG
from mechscope.errors import InputError
from mechscope.features.sites import Where
from mechscope.runs import RunDir

DICTIONARIES = "dictionaries"


def dictionary_folder(run: RunDir | Path, name: str) -> Path:
    return Path(run) / DICTIONARIES / name


def where_of(d: Dictionary) -> Where:
    """Where a dictionary read from disk reads and writes: its ``mechscope_site`` metadata,
    or its SAELens hook names."""
    meta = d.config.extra  # cfg.json's metadata, as the SAELens reader keeps it
    if "mechscope_site" in meta:
        site, layer = meta["mechscope_site"].rsplit(".", 1)
        out = meta.get("mechscope_site_out", meta["mechscope_site"]).rsplit(".", 1)[0]
        return Where(int(layer), site, out)
    hook_in, hook_out = d.config.hook_in, d.config.hook_out or d.config.hook_in
    if hook_in is None or hook_in.layer is None:
        raise InputError("a dictionary whose hook names its site and layer", field="dictionary")
    return Where(hook_in.layer, hook_in.site, hook_out.site)


def run_dictionaries(folder: Path) -> dict[str, tuple[Dictionary, Where]]:
    """Every dictionary under ``folder/dictionaries`` (a run), or ``folder`` itself (one
    dictionary's folder), with where it reads and writes."""
    folder = Path(folder)
    paths = (
        [folder]
        if (folder / CFG).is_file()
        else sorted(p for p in (folder / DICTIONARIES).glob("*") if (p / CFG).is_file())
    )
    out = {}
    for p in paths:
        d = load_dictionary(p)
        w = where_of(d)
        out[w.name] = (d, w)
    return dict(sorted(out.items(), key=lambda kv: kv[1][1]))
