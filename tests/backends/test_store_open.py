"""Opening a store binds it to a task table and makes batchd's own tables when they are missing. Every
process opens it as it starts (the master, each worker, each command), so on a server that has them all
it is one read of the schema, not a read and a CREATE per table."""
from batchd.model import TaskLayout

LAYOUT = TaskLayout("crawl_task")
BATCHD_TABLES = ("crawl_task_batch_record", "crawl_task_item", "crawl_task_failure", "crawl_task_page",
                 "crawl_task_revisit")


def statements_so_far(store) -> int:
    """The statements this store's own session has sent (MariaDB's session `Questions`), the SHOW included."""
    return int(store.fetch("SHOW SESSION STATUS LIKE 'Questions'")[0][1])


def test_the_first_open_makes_batchds_tables_and_the_next_reads_the_schema_once(mysql_backend):
    mysql_backend.create_tasks(["http://x.invalid/1"]).close()
    first = mysql_backend.store()
    first.open(LAYOUT)
    first.close()
    made = {row[0] for row in mysql_backend.sql(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()")}
    assert made >= set(BATCHD_TABLES)

    store = mysql_backend.store()
    before = statements_so_far(store)
    store.open(LAYOUT)
    sent = statements_so_far(store) - before - 1
    store.close()
    # The columns of the six tables in one read, and the state column's index: nothing is made again.
    assert sent == 2


def test_the_columns_of_several_tables_are_read_at_once_and_a_missing_one_has_none(mysql_backend):
    store = mysql_backend.create_tasks(["http://x.invalid/1"])
    found = store.tables_columns(["crawl_task", "no_such_table"])
    store.close()
    assert set(found) == {"crawl_task", "no_such_table"} and found["no_such_table"] == {}
    assert {"id", "url", "batch_status", "update_time"} <= set(found["crawl_task"])
    assert found["crawl_task"]["update_time"]["DATA_TYPE"].lower() in ("datetime", "timestamp")
