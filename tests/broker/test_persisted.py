"""The broker's JSON config files (topics.json, consumerOffset.json, ...) survive torn writes."""

from ferrymq.broker.persisted import load_json, save_json
from ferrymq.protocol.bodies import KVTable


def test_config_files_survive_a_torn_main_copy(tmp_path):
    path = tmp_path / "config" / "consumerOffset.json"
    save_json(path, KVTable(table={"v": "1"}))
    save_json(path, KVTable(table={"v": "2"}))
    assert load_json(path, KVTable).table == {"v": "2"}
    path.write_bytes(b'{"table": {"v": "3"')  # torn by a crash
    assert load_json(path, KVTable).table == {"v": "1"}  # the .bak copy
    assert load_json(tmp_path / "missing.json", KVTable).table == {}
    assert not list(path.parent.glob("*.tmp"))
