"""ARCHIVE_KEEP: as a batch opens, the master keeps its folder and those of the ARCHIVE_KEEP batches before it,
and removes older ones, logging each removal, but never one whose records a kept batch's revisit records stand
for (index.py): a reparse of a kept batch finds the bodies of its unchanged pages (and the batch opening, whose
304s stand for the same responses as the batch before's, finds them too). Only the folders under the master's own ARCHIVE_PATH
are looked at (a machine's workers write under theirs: share the folder, or run the master beside them)."""
import logging
import shutil

from ..config import Settings
from .files import batch_folders
from .index import FolderIndex, revisit_target

log = logging.getLogger("batchd.archive")


def remove_old_batches(settings: Settings, namespace: str, newest: int) -> list:
    """Remove the folders of batches before `newest` and its ARCHIVE_KEEP last that no kept batch refers to; the
    ids removed (none with ARCHIVE off: its folders, if any, are the operator's)."""
    if settings.ARCHIVE == "off":
        return []
    folders = batch_folders(settings.archive_path(), namespace)
    oldest_kept = newest - settings.ARCHIVE_KEEP
    old = sorted(b for b in folders if b < oldest_kept)
    if not old:
        return []
    indexes: dict = {}

    def index_of(batch_id: int) -> FolderIndex:
        if batch_id not in indexes:
            indexes[batch_id] = FolderIndex(folders[batch_id])
        return indexes[batch_id]

    referred = {target[0] for kept in folders if kept >= oldest_kept for revisit in index_of(kept).revisits
                for target in [revisit_target(revisit, kept, list(folders), index_of)] if target is not None}
    removed = []
    for batch_id in old:
        if batch_id in referred:
            continue
        try:
            shutil.rmtree(folders[batch_id])
        except OSError as e:
            log.warning("archive: batch %d's folder %s not removed: %s", batch_id, folders[batch_id], e)
            continue
        log.info("archive: batch %d's folder %s removed (ARCHIVE_KEEP=%d)", batch_id, folders[batch_id],
                 settings.ARCHIVE_KEEP)
        removed.append(batch_id)
    return removed
