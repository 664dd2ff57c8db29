"""Archives and folders a model arrives in, checked before any library opens them.

Zip archives (.pt2, .keras, .skops): every entry must stay inside the archive (no absolute
path, no ``..``, no link entry), appear once (two entries of one name are read differently by
different readers), and the whole must inflate to a size the memory budget allows, with no
entry inflating more than ``MAX_RATIO`` times (a zip bomb). Folders (.mlpackage, SavedModel):
no link leading out of the folder, no hard-linked file (a second name may live outside), no
special files, a bounded number of entries and total size.

Sizes come from the archive's directory (what a reader will inflate to); a reader that finds
more than declared stops with its own error, which the loaders report as bad input.
"""

from __future__ import annotations

import lzma
import os
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from unframe import limits
from unframe.errors import InputError, ResourceLimitError

MAX_ENTRIES = 100_000
MAX_RATIO = 1000  # inflated / compressed, for entries above RATIO_FLOOR
RATIO_FLOOR = 1 << 20  # small entries (JSON, configs) compress well and legitimately


# What reading a damaged or unusual zip can raise: a bad directory, a member past the end,
# corrupt deflate/lzma data, a version, encryption or compression zipfile doesn't implement
# (NotImplementedError), a password-protected member (RuntimeError)
ZIP_READ_ERRORS: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError,
    RuntimeError, zlib.error, lzma.LZMAError)


def is_zip(path: Path) -> bool:
    """``zipfile.is_zipfile``, which raises on some malformed directories: those are zips too
    (``check_zip`` then says what is wrong with them)."""
    try:
        return zipfile.is_zipfile(path)
    except (zipfile.BadZipFile, ValueError, EOFError):
        return True


def check_zip(path: Path, what: str = "archive") -> None:
    """Refuse a zip archive whose entries escape it, repeat, are links, or inflate too much."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except ZIP_READ_ERRORS as exc:
        raise InputError(f"{path}: not a readable {what} ({exc})", "the file may be truncated; re-save it") from None
    if len(infos) > MAX_ENTRIES:
        raise ResourceLimitError(f"{path}: the {what} has {len(infos)} entries (at most {MAX_ENTRIES})",
                                 "re-save the model; no model needs that many files")
    seen: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        _check_entry_name(path, name, what)
        if name in seen:
            raise InputError(f"{path}: the {what} holds two entries named {name!r}",
                             "readers disagree on which one counts; re-save the model")
        seen.add(name)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise InputError(f"{path}: the {what} entry {name!r} is a link",
                             "a link can lead out of the archive; re-save the model")
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise ResourceLimitError(
                f"{path}: the {what} entry {name!r} inflates {info.file_size // max(info.compress_size, 1)} "
                f"times (to {limits.human(info.file_size)}); a zip bomb?", "re-save the model uncompressed")
        total += info.file_size
    limits.check_alloc(total, f"{path}: the {what} inflated", "raise --max-memory if the model is that large")


def _check_entry_name(path: Path, name: str, what: str) -> None:
    text = name.replace("\\", "/")
    parts = PurePosixPath(text).parts
    if not name or "\0" in name or text.startswith("/") or (len(text) > 1 and text[1] == ":") or ".." in parts:
        raise InputError(f"{path}: the {what} entry {name!r} points outside the archive",
                         "the archive is malformed or hostile; re-save the model")


def check_folder(path: Path, what: str = "model folder") -> None:
    """Refuse a model folder with a link leading out of it, a hard-linked or special file, or
    more entries or bytes than the limits allow. Links inside the folder are fine."""
    base = path.resolve()
    count, total = 0, 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            entry = Path(root) / name
            count += 1
            if count > MAX_ENTRIES:
                raise ResourceLimitError(f"{path}: the {what} has more than {MAX_ENTRIES} entries",
                                         "no model needs that many files")
            total += _check_entry(base, path, entry, what)
    limits.check_alloc(total, f"{path}: the {what}'s files", "raise --max-memory if the model is that large")


def _check_entry(base: Path, path: Path, entry: Path, what: str) -> int:
    try:
        st = entry.lstat()
    except OSError as exc:
        raise InputError(f"{path}: {entry.relative_to(path)} can't be read ({exc.strerror})",
                         "check the folder's permissions") from None
    rel = entry.relative_to(path)
    if stat.S_ISLNK(st.st_mode):
        target = entry.resolve()
        if target != base and base not in target.parents:
            raise InputError(f"{path}: {rel} in the {what} links outside it (to {target})",
                             "copy the file into the folder instead of linking it")
        return 0
    if stat.S_ISDIR(st.st_mode):
        return 0
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: {rel} in the {what} is not a regular file",
                         "a model folder holds files and folders only")
    if st.st_nlink > 1:
        raise InputError(f"{path}: {rel} in the {what} has {st.st_nlink} hard links",
                         "a hard link can expose a file from outside the folder; copy it in instead")
    return st.st_size
