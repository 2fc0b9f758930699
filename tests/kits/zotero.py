"""Zotero data directories for tests: a copy of a real one from ../shared, changed the way Zotero
changes it (items, attachments, trash, groups), through Zotero's own schema and names.

Every id is looked up by name (`itemTypesCombined`, `fieldsCombined`), as the reader does, so the
same helpers work on the Zotero 5, 6 and 7 databases.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import stat
from pathlib import Path

ZOTERO_DIRS = ("FranziZimm__Literaturedatabase", "San7o__research-papers-collection", "pthemis5__Zotero")


def copy_zotero_dir(shared_data: Path, name: str, dest: Path) -> Path:
    """A writable copy of one of ../shared's real Zotero data directories."""
    shutil.copytree(shared_data / "zotero_dirs" / name, dest)
    for root, dirs, files in os.walk(dest):
        for n in dirs + files:
            p = os.path.join(root, n)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    os.chmod(dest, os.stat(dest).st_mode | stat.S_IWUSR)
    return dest


def tree_state(root: Path) -> dict[str, tuple[int, int, str]]:
    """(size, mtime_ns, sha256) of every file under `root`: compared before and after a command
    to prove it wrote nothing there."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


class ZoteroDb:
    """Zotero's changes made by hand on a copy of a data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = data_dir
        self.conn = sqlite3.connect(data_dir / "zotero.sqlite", isolation_level=None)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ZoteroDb:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _id(self, sql: str, *args) -> int:
        row = self.conn.execute(sql, args).fetchone()
        assert row is not None, (sql, args)
        return row[0]

    def type_id(self, name: str) -> int:
        return self._id("SELECT itemTypeID FROM itemTypesCombined WHERE typeName = ?", name)

    def field_id(self, name: str) -> int:
        return self._id("SELECT fieldID FROM fieldsCombined WHERE fieldName = ?", name)

    def item_id(self, key: str) -> int:
        return self._id("SELECT itemID FROM items WHERE key = ?", key)

    def set_field(self, item_id: int, name: str, value: str) -> None:
        c = self.conn
        c.execute("INSERT OR IGNORE INTO itemDataValues (value) VALUES (?)", (value,))
        vid = self._id("SELECT valueID FROM itemDataValues WHERE value = ?", value)
        c.execute("INSERT OR REPLACE INTO itemData (itemID, fieldID, valueID) VALUES (?, ?, ?)",
                  (item_id, self.field_id(name), vid))
        c.execute("UPDATE items SET dateModified = CURRENT_TIMESTAMP WHERE itemID = ?", (item_id,))

    def add_item(self, key: str, title: str, *, item_type: str = "journalArticle", library_id: int = 1,
                 author: tuple[str, str] | None = ("Ada", "Lovelace"), date: str | None = "2021-03-00 2021-03") -> int:
        c = self.conn
        c.execute("INSERT INTO items (itemTypeID, libraryID, key) VALUES (?, ?, ?)",
                  (self.type_id(item_type), library_id, key))
        iid = self.item_id_in(library_id, key)
        self.set_field(iid, "title", title)
        if date:
            self.set_field(iid, "date", date)
        if author:
            c.execute("INSERT OR IGNORE INTO creators (firstName, lastName, fieldMode) VALUES (?, ?, 0)", author)
            cid = self._id("SELECT creatorID FROM creators WHERE firstName = ? AND lastName = ? AND fieldMode = 0",
                           *author)
            role = self._id("SELECT creatorTypeID FROM creatorTypes WHERE creatorType = 'author'")
            c.execute("INSERT INTO itemCreators (itemID, creatorID, creatorTypeID, orderIndex) VALUES (?, ?, ?, 0)",
                      (iid, cid, role))
        return iid

    def item_id_in(self, library_id: int, key: str) -> int:
        return self._id("SELECT itemID FROM items WHERE libraryID = ? AND key = ?", library_id, key)

    def add_pdf(self, parent: int | None, key: str, pdf: Path, *, library_id: int = 1, linked: str | None = None,
                title: str = "Full Text PDF") -> int:
        """A PDF attachment: stored (copied into storage/<key>/) or, with `linked`, a linked file
        whose path Zotero keeps as given (absolute or `attachments:REL`)."""
        c = self.conn
        c.execute("INSERT INTO items (itemTypeID, libraryID, key) VALUES (?, ?, ?)",
                  (self.type_id("attachment"), library_id, key))
        iid = self.item_id_in(library_id, key)
        if linked is None:
            folder = self.dir / "storage" / key
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pdf, folder / pdf.name)
            path, mode = f"storage:{pdf.name}", 0
        else:
            path, mode = linked, 2
        c.execute("INSERT INTO itemAttachments (itemID, parentItemID, linkMode, contentType, path) "
                  "VALUES (?, ?, ?, 'application/pdf', ?)", (iid, parent, mode, path))
        self.set_field(iid, "title", title)
        return iid

    def add_note(self, parent: int, key: str, html: str) -> int:
        self.conn.execute("INSERT INTO items (itemTypeID, libraryID, key) VALUES (?, 1, ?)", (self.type_id("note"), key))
        iid = self.item_id(key)
        self.conn.execute("INSERT INTO itemNotes (itemID, parentItemID, note, title) VALUES (?, ?, ?, '')",
                          (iid, parent, html))
        return iid

    def add_stored_file(self, parent: int | None, key: str, name: str, *, pdf: Path | None = None,
                        ft_cache: str | None = None, content_type: str = "application/pdf") -> int:
        """A stored attachment (`storage:<name>`): the file copied from `pdf`, or left missing as in a
        library synced without its files; `ft_cache` is Zotero's extracted text beside it."""
        c = self.conn
        c.execute("INSERT INTO items (itemTypeID, libraryID, key) VALUES (?, 1, ?)", (self.type_id("attachment"), key))
        iid = self.item_id(key)
        folder = self.dir / "storage" / key
        if pdf is not None or ft_cache is not None:
            folder.mkdir(parents=True, exist_ok=True)
        if pdf is not None:
            shutil.copyfile(pdf, folder / name)
        if ft_cache is not None:
            (folder / ".zotero-ft-cache").write_text(ft_cache, encoding="utf-8")
        c.execute("INSERT INTO itemAttachments (itemID, parentItemID, linkMode, contentType, path) "
                  "VALUES (?, ?, 0, ?, ?)", (iid, parent, content_type, f"storage:{name}"))
        self.set_field(iid, "title", "Full Text PDF")
        return iid

    def add_tag(self, item_id: int, name: str) -> None:
        c = self.conn
        c.execute("INSERT OR IGNORE INTO tags (name) VALUES (?)", (name,))
        tid = self._id("SELECT tagID FROM tags WHERE name = ?", name)
        c.execute("INSERT OR IGNORE INTO itemTags (itemID, tagID, type) VALUES (?, ?, 0)", (item_id, tid))

    def add_collection(self, key: str, name: str, parent: int | None = None, *, library_id: int = 1) -> int:
        self.conn.execute("INSERT INTO collections (collectionName, parentCollectionID, libraryID, key) "
                          "VALUES (?, ?, ?, ?)", (name, parent, library_id, key))
        return self._id("SELECT collectionID FROM collections WHERE libraryID = ? AND key = ?", library_id, key)

    def add_to_collection(self, collection_id: int, item_id: int) -> None:
        self.conn.execute("INSERT OR IGNORE INTO collectionItems (collectionID, itemID, orderIndex) "
                          "VALUES (?, ?, (SELECT count(*) FROM collectionItems WHERE collectionID = ?))",
                          (collection_id, item_id, collection_id))

    @contextlib.contextmanager
    def transaction(self):
        """Many changes as one write (as Zotero commits an import): thousands of items in seconds."""
        self.conn.execute("BEGIN")
        try:
            yield self
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def trash(self, item_id: int) -> None:
        self.conn.execute("INSERT INTO deletedItems (itemID) VALUES (?)", (item_id,))

    def restore(self, item_id: int) -> None:
        self.conn.execute("DELETE FROM deletedItems WHERE itemID = ?", (item_id,))

    def add_group(self, group_id: int, name: str) -> int:
        c = self.conn
        c.execute("INSERT INTO libraries (type, editable, filesEditable) VALUES ('group', 1, 1)")
        lib = self._id("SELECT max(libraryID) FROM libraries")
        c.execute("INSERT INTO groups (groupID, libraryID, name, description, version) VALUES (?, ?, ?, '', 0)",
                  (group_id, lib, name))
        return lib
