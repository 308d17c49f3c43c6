"""Subscription group configs, persisted in config/subscriptionGroup.json."""

from __future__ import annotations

from pathlib import Path

from ferrymq.broker.persisted import CoalescedSave, load_json, next_version
from ferrymq.protocol.bodies import SubscriptionGroupConfig, SubscriptionGroupWrapper


class SubscriptionGroupManager:
    def __init__(self, config_dir: Path, auto_create: bool) -> None:
        self.path = config_dir / "subscriptionGroup.json"
        wrapper = load_json(self.path, SubscriptionGroupWrapper)
        self.groups: dict[str, SubscriptionGroupConfig] = dict(wrapper.subscription_group_table)
        self.data_version = wrapper.data_version
        self.file = CoalescedSave(self.path, self.wrapper)
        self.auto_create = auto_create

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults on first use when auto-creation is on."""
        config = self.groups.get(group)
        if config is None and self.auto_create:
            config = SubscriptionGroupConfig(group)
            self.put(config)
        return config

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config if it exists; a look-up never creates one."""
        return self.groups.get(group)

    def put(self, config: SubscriptionGroupConfig) -> None:
        self.put_many([config])

    def put_many(self, configs: list[SubscriptionGroupConfig]) -> None:
        """Add or replace several groups; one background write of the file covers them all."""
        self.groups = {**self.groups, **{c.group_name: c for c in configs}}
        self._changed()

    def delete(self, group: str) -> bool:
        if group not in self.groups:
            return False
        self.groups = {k: v for k, v in self.groups.items() if k != group}
        self._changed()
        return True

    def adopt(self, wrapper: SubscriptionGroupWrapper) -> bool:
        """Take the master's group table (a slave's copy), if it changed since the last one taken."""
        if wrapper.data_version == self.data_version:
            return False
        self.groups = dict(wrapper.subscription_group_table)
        self.data_version = wrapper.data_version
        self.file.changed()
        return True

    async def saved(self) -> None:
        """Return once the changes made so far are on disk (what an admin request answers after)."""
        await self.file.saved()

    def wrapper(self) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper(
            subscription_group_table=dict(self.groups), data_version=self.data_version
        )

    def _changed(self) -> None:
        self.data_version = next_version(self.data_version)
        self.file.changed()
