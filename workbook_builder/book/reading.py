"""Files a user names, read within stated bounds: only regular files (a FIFO would wait
forever, /dev/zero never end), a size checked before reading, and a zip's directory and
members checked by the sizes they declare before anything is unpacked.

A stored zip member can be read in place (`stored_member_offset`), and a zip inside
another file (a torch .pt read as a range of a zip) is bounded through its open handle
(`check_zip_handle`). A member too large for the process's memory is one line, not a
MemoryError.

Standard library only: the checkpoint reader, which imports nothing heavy, uses it too.
"""

import os
import stat
import zipfile
from pathlib import Path
from typing import BinaryIO

from workbook_builder.errors import UserError

# a zip's directory lists each part in 46 bytes plus its name; attnsheets' workbooks list
# a few dozen parts in a few KB, a model folder a handful
MAX_ZIP_PARTS = 10_000
MAX_ZIP_DIRECTORY_BYTES = 4 * 2**20
_END = b"PK\x05\x06"            # end of central directory record
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_END = b"PK\x06\x06"


def regular_file(path: Path, what: str = "file") -> os.stat_result:
    """The file's status, or one line saying why it is not a regular file to read."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(status.st_mode):
        raise UserError(f"{path} is a folder, not a {what}")
    if not stat.S_ISREG(status.st_mode):
        raise UserError(f"{path} is not a regular file (a pipe, a device or a socket); "
                        f"give a {what} saved on disk")
    return status


def read_bounded(path: Path, limit: int, what: str = "file", why: str = "") -> bytes:
    """The bytes of a regular file of at most `limit` bytes, its size checked before it is
    read (and again while reading, should it grow meanwhile)."""
    size = regular_file(path, what).st_size
    if size <= limit:
        try:
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
        except OSError as exc:
            raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        size = len(data)
        if size <= limit:
            return data
    raise UserError(f"{path} is {_megabytes(size)}, more than the {_megabytes(limit)} "
                    f"attnsheets reads in one {what}" + (f" ({why})" if why else ""))


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MB" if size < 10 * 2**20 else f"{size / 2**20:,.0f} MB"


def zip_directory(path: Path) -> tuple[int, int] | None:
    """(parts, bytes) that the zip's end record says its directory holds, read from the
    file's last bytes without parsing the directory itself; None when there is no end
    record (not a zip)."""
    with open(path, "rb") as handle:
        return _zip_directory(handle)


def _zip_directory(handle: BinaryIO) -> tuple[int, int] | None:
    """`zip_directory` of an open, seekable binary file."""
    size = handle.seek(0, os.SEEK_END)
    tail_size = min(size, 22 + 0xFFFF)  # the record, then a comment of up to 64 KB
    handle.seek(size - tail_size)
    tail = handle.read(tail_size)
    at = tail.rfind(_END)
    if at < 0 or len(tail) < at + 22:
        return None
    parts = int.from_bytes(tail[at + 10:at + 12], "little")
    directory = int.from_bytes(tail[at + 12:at + 16], "little")
    locator = tail[at - 20:at] if at >= 20 else b""
    if locator[:4] == _ZIP64_LOCATOR:  # more than 65,535 parts, or beyond 4 GB
        handle.seek(int.from_bytes(locator[8:16], "little"))
        record = handle.read(56)
        if record[:4] == _ZIP64_END:
            parts = int.from_bytes(record[32:40], "little")
            directory = int.from_bytes(record[40:48], "little")
    return parts, directory


def check_zip_directory(path: Path, what: str = "workbook") -> None:
    """Refuse, before the directory is parsed (Python's zipfile makes an object of every
    entry), a zip listing more than MAX_ZIP_PARTS parts or a directory larger than
    MAX_ZIP_DIRECTORY_BYTES; zipfile reads the directory by its stated size, so this
    bounds what it reads whatever the entry count claims."""
    regular_file(path, what)
    found = zip_directory(path)
    if found is None:
        return  # zipfile says what is wrong
    _refuse_large_directory(found, path, what)


def check_zip_handle(handle: BinaryIO, where: str, what: str) -> None:
    """`check_zip_directory` of a zip open as a seekable binary file (a torch .pt, itself
    perhaps a member of a zip), named `where`."""
    found = _zip_directory(handle)
    handle.seek(0)
    if found is not None:
        _refuse_large_directory(found, where, what)


def _refuse_large_directory(found: tuple[int, int], where, what: str) -> None:
    parts, directory = found
    if parts > MAX_ZIP_PARTS or directory > MAX_ZIP_DIRECTORY_BYTES:
        raise UserError(f"{where}: its zip lists {parts:,} parts in a directory of "
                        f"{_megabytes(directory)}; a {what} attnsheets reads has at most "
                        f"{MAX_ZIP_PARTS:,} parts")


def stored_member_offset(source: Path | BinaryIO, info: zipfile.ZipInfo, where: str) -> int:
    """Where a stored (unpacked) member's bytes start in its zip: after its local header
    (30 bytes, its name and its extra field, whose lengths the local header states), so
    that the member can be read in place, a range at a time."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            return stored_member_offset(handle, info, where)
    source.seek(info.header_offset)
    local = source.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise UserError(f"{where}: not a readable zip member (no local header where the "
                        f"directory points)")
    name_length = int.from_bytes(local[26:28], "little")
    extra_length = int.from_bytes(local[28:30], "little")
    return info.header_offset + 30 + name_length + extra_length


def check_zip_parts(archive: zipfile.ZipFile, path: Path, what: str = "workbook") -> None:
    """`check_zip_directory`'s bound on the parts zipfile found (a directory may claim
    fewer than it holds)."""
    if len(archive.infolist()) > MAX_ZIP_PARTS:
        raise UserError(f"{path}: its zip lists {len(archive.infolist()):,} parts; a {what} "
                        f"attnsheets reads has at most {MAX_ZIP_PARTS:,}")


def read_member(archive: zipfile.ZipFile, name: str, limit: int, where: str) -> bytearray:
    """One member of a zip, refused by the size its directory declares before any byte is
    unpacked, then unpacked into a buffer of exactly that size (zipfile never gives more
    than the declared size, and checks the CRC at the end)."""
    info = archive.getinfo(name)
    if info.file_size > limit:
        raise UserError(f"{where} unpacks to {_megabytes(info.file_size)} (packed "
                        f"{_megabytes(info.compress_size)}), more than the "
                        f"{_megabytes(limit)} attnsheets reads from it")
    try:
        data = bytearray(info.file_size)
    except MemoryError:
        raise UserError(f"{where} unpacks to {_megabytes(info.file_size)}, more than this "
                        f"process's memory holds; unzip it and give the folder") from None
    view = memoryview(data)
    with archive.open(info) as member:
        done = 0
        while done < len(data):
            got = member.readinto(view[done:])
            if not got:
                raise UserError(f"{where}: the zip holds fewer bytes than it declares")
            done += got
        if member.read(1):  # past the declared size: CRC check fails, or nothing is there
            raise UserError(f"{where}: the zip holds more bytes than it declares")
    return data
