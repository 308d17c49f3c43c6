"""One settings loader for every role: sources in order, RocketMQ's names, errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq.broker.config import BrokerConfig
from ferrymq.controller.config import ControllerConfig
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.settings import SettingsError, load, reference, snake


def test_rocketmq_camel_case_names_read_as_ours():
    assert snake("flushDiskType") == "flush_disk_type"
    assert snake("brokerIP1") == "broker_ip1"
    assert snake("mappedFileSizeCommitLog") == "mapped_file_size_commit_log"
    assert snake("haMaxTimeSlaveNotCatchup") == "ha_max_time_slave_not_catchup"
    assert snake("listen_port") == "listen_port"


def test_file_then_environment_then_flags(tmp_path: Path):
    toml = tmp_path / "broker.toml"
    toml.write_text(
        'brokerName = "from-file"\nfileReservedTime = 48\nflushDiskType = "SYNC_FLUSH"\n'
        '[store]\ndelete_when = "03"\n'
    )
    env = {"FERRYMQ_FILE_RESERVED_TIME": "24", "FERRYMQ_BROKER_NAME": "from-env"}
    config = load(BrokerConfig, toml, {"broker_name": "from-flag", "broker_id": None}, environ=env)
    assert config.broker_name == "from-flag"
    assert config.store.file_reserved_time == 24
    assert config.store.flush_disk_type == "SYNC_FLUSH"
    assert config.store.delete_when == "03"


def test_errors_name_the_setting_and_its_source(tmp_path: Path):
    toml = tmp_path / "namesrv.toml"
    toml.write_text("listen_prot = 9876\n")
    with pytest.raises(
        SettingsError, match=r"namesrv.toml: unknown setting 'listen_prot' \(did you mean 'listen_port'\?\)"
    ):
        load(NamesrvConfig, toml, environ={})
    with pytest.raises(
        SettingsError, match=r"'listen_port' must be int, not 'x' \(from \$FERRYMQ_LISTEN_PORT\)"
    ):
        load(NamesrvConfig, None, environ={"FERRYMQ_LISTEN_PORT": "x"})
    with pytest.raises(SettingsError, match="must be bool"):
        load(NamesrvConfig, None, {"auth_enabled": "maybe"}, environ={})
    toml.write_text("listen_port = [")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load(NamesrvConfig, toml, environ={})
    with pytest.raises(SettingsError, match="cannot read"):
        load(NamesrvConfig, tmp_path / "absent.toml", environ={})
    with pytest.raises(SettingsError, match=r"0\.\.65535"):  # the role's own checks come through too
        load(NamesrvConfig, None, {"listen_port": 70000}, environ={})


def test_values_take_their_settings_types():
    config = load(NamesrvConfig, None, {"kv_config_path": "/tmp/kv.json", "auth_enabled": "yes"}, environ={})
    assert config.kv_config_path == Path("/tmp/kv.json") and config.auth_enabled is True
    assert load(NamesrvConfig, None, {"kv_config_path": ""}, environ={}).kv_config_path is None


def test_the_reference_lists_every_setting_with_its_type_and_default():
    rows = {name: (kind, default) for name, kind, default in reference(BrokerConfig)}
    assert rows["flush_disk_type"] == ("str", '"ASYNC_FLUSH"')  # a store setting, flattened in
    assert rows["broker_id"] == ("int", "0")
    assert rows["listen_port"] == ("int", "10_911")
    assert rows["store_path_root_dir"] == ("Path", "~/store")
    assert rows["auto_create_topic_enable"] == ("bool", "true")
    assert "store" not in rows


DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
TLS = "TLS settings (every role)"


def _documented(section: str) -> dict[str, tuple[str, str]]:
    """name: (type, default) of the table rows under the `## section` heading of configuration.md."""
    text = DOCS.read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    in_table = False
    for line in text.splitlines():
        if line.startswith("| setting | type | default | meaning |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and line.startswith("| `"):
            cells = [c.strip() for c in line.replace("\\|", "\0").strip("|").split("|")]
            rows[cells[0].strip("`")] = (cells[1].replace("\0", "|"), cells[2].strip("`"))
    return rows


@pytest.mark.parametrize(
    ("sections", "cls"),
    [(("Broker settings", "Store settings", TLS), BrokerConfig), (("NameServer", TLS), NamesrvConfig),
     (("Controller", TLS), ControllerConfig)],
)  # fmt: skip
def test_the_configuration_page_lists_exactly_the_settings_of_the_code(sections, cls):
    documented = {name: row for section in sections for name, row in _documented(section).items()}
    in_code = {name: (kind, default) for name, kind, default in reference(cls)}
    assert documented == in_code


def test_the_running_servers_view_hides_secrets_and_updates_are_all_or_nothing():
    from ferrymq.settings import HIDDEN, ReadOnlySetting, apply_settings, settings_view

    config = BrokerConfig.from_settings({"init_username": "root", "init_password": "pw"})
    view = settings_view(config, config.store)
    assert view["initPassword"] == HIDDEN and view["initUsername"] == "root"
    assert view["flushDiskType"] == "ASYNC_FLUSH" and view["autoCreateTopicEnable"] == "true"
    apply_settings({"brokerPermission": "4", "file_reserved_time": "24"}, config, config.store)
    assert config.broker_permission == 4 and config.store.file_reserved_time == 24
    with pytest.raises(ReadOnlySetting):
        apply_settings({"brokerName": "x"}, config, config.store, read_only=frozenset({"brokerName"}))
    with pytest.raises(SettingsError, match="go together"):  # the config's own check, then undone
        apply_settings({"brokerPermission": "2", "initPassword": ""}, config, config.store)
    assert config.broker_permission == 4 and config.init_password == "pw"
