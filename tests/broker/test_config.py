"""Broker settings from a TOML file, FERRYMQ_* environment variables and the command line."""

from __future__ import annotations

import dataclasses

import pytest

from ferrymq.broker.config import BrokerConfig, ConfigError
from ferrymq.store import StoreConfig
from tests.pki import pki  # noqa: F401  (fixture)


def _settings() -> list[tuple[str, object]]:
    defaults = BrokerConfig()
    store = defaults.store
    return [
        (f.name, getattr(defaults, f.name)) for f in dataclasses.fields(BrokerConfig) if f.name != "store"
    ] + [(f.name, getattr(store, f.name)) for f in dataclasses.fields(StoreConfig)]


@pytest.mark.parametrize(("name", "default"), _settings())
def test_every_setting_reads_back_from_its_environment_text(monkeypatch, name, default):
    text = str(default).lower() if isinstance(default, bool) else str(default)
    monkeypatch.setenv(f"FERRYMQ_{name.upper()}", text)
    config = BrokerConfig.load()
    value = getattr(config.store if hasattr(config.store, name) else config, name)
    assert value == default and type(value) is type(default)


def test_sources_in_order_and_numbers_of_either_kind(tmp_path, monkeypatch):
    toml = tmp_path / "broker.toml"
    toml.write_text('broker_name = "from-toml"\nha_async_coalesce_ms = 3\nflush_interval_commit_log = 700\n')
    monkeypatch.setenv("FERRYMQ_BROKER_NAME", "from-env")
    monkeypatch.setenv("FERRYMQ_HA_ASYNC_COALESCE_MS", "2.5")
    config = BrokerConfig.load(toml, {"broker_name": "from-flag", "cluster_name": None})
    assert config.broker_name == "from-flag" and config.ha_async_coalesce_ms == 2.5
    assert config.store.flush_interval_commit_log == 700
    assert BrokerConfig.load(toml).ha_async_coalesce_ms == 2.5  # the environment beats the file
    monkeypatch.delenv("FERRYMQ_HA_ASYNC_COALESCE_MS")
    assert BrokerConfig.load(toml).ha_async_coalesce_ms == 3.0  # a TOML integer for a float setting


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("ha_async_coalesce_ms", "soon", "'ha_async_coalesce_ms' must be float, not 'soon'"),
        ("ha_async_coalesce_ms", True, "must be float"),
        ("listen_port", "10911.5", "'listen_port' must be int"),
        ("auto_create_topic_enable", "maybe", "must be bool"),
        ("no_such_setting", "1", "unknown setting 'no_such_setting'"),
    ],
)
def test_a_bad_setting_is_refused_clearly(setting, value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        BrokerConfig.from_settings({setting: value})


def test_tls_settings_from_toml_as_in_rocketmq(tmp_path, pki):  # noqa: F811
    toml = tmp_path / "broker.toml"
    toml.write_text(
        f'tls_server_mode = "permissive"\ntls_server_cert_path = "{pki.server.cert}"\n'
        f'tls_server_key_path = "{pki.server.key}"\ntls_enable = true\n'
        f'tls_client_trust_cert_path = "{pki.ca.cert}"\n'
    )
    config = BrokerConfig.load(toml)
    server = config.server_tls()
    assert server is not None and server.permissive and server.context().verify_mode.name == "CERT_NONE"
    client = config.client_tls()
    assert client is not None and client.trust_cert_path == str(pki.ca.cert) and client.auth_server
