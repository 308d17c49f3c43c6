"""The console in a real browser against a real cluster: pages clicked through as a user would."""

from __future__ import annotations

import re

import pytest

from ferrymq.bench.processes import free_port
from ferrymq.client import ClientError, Message, Producer
from tests.console.browser import chromium_page
from tests.console.conftest import commit, send_as
from tests.metrics.conftest import eventually


async def test_topics_messages_groups_and_dashboard_in_a_browser(cluster_console):
    cluster, console = cluster_console
    async with chromium_page() as (page, expect):
        # A topic created in the page is in the cluster.
        await page.goto(console.url + "/#/topics")
        form = page.locator("#create-topic")
        await form.locator("input[name=topic]").fill("WebTopic")
        await form.locator("input[name=queues]").fill("2")
        await form.locator("button").click()
        await expect(page).to_have_url(re.compile(r"#/topics/WebTopic$"))
        await expect(page.locator("#status tbody tr")).to_have_count(2)
        assert cluster.broker.topics.get("WebTopic").read_queue_nums == 2

        # A test message sent from the page is found by the message search.
        send = page.locator("#send-message")
        await send.locator("input[name=keys]").fill("webkey")
        await send.locator("input[name=body]").fill("sent from the browser")
        await send.locator("button").click()
        msg_id = await page.locator("#sent-id").text_content()
        await page.get_by_role("link", name="find it").click()
        await expect(page.locator("#found")).to_contain_text(msg_id)
        await expect(page.locator("#found")).to_contain_text("sent from the browser")
        await page.goto(console.url + "/#/messages")
        by_key = page.locator("#by-key")
        await by_key.locator("input[name=topic]").fill("WebTopic")
        await by_key.locator("input[name=key]").fill("webkey")
        await by_key.locator("button").click()
        await expect(page.locator("#found tbody tr")).to_have_count(1)
        await expect(page.locator("#found")).to_contain_text(msg_id)

        # A group with a backlog shows its lag, on its page, in the list and on the dashboard.
        for i in range(4):
            await console.post("/api/topics/WebTopic/send", {"body": f"backlog {i}"})
        await cluster.settled()
        for queue_id in (0, 1):
            await commit(cluster, "WebGroup", "WebTopic", queue_id, 0)
        console.server.cluster.forget_lags()
        await page.goto(console.url + "/#/groups")
        await page.locator("#group-filter").fill("WebGroup")
        await expect(page.locator("#groups tbody tr")).to_have_count(1)
        await expect(page.locator("#groups tbody tr")).to_contain_text("5")
        await page.get_by_role("link", name="WebGroup").click()
        await expect(page.locator("#group-lag")).to_have_text("5")
        await page.locator("#pause").click()
        await expect(page.locator("#controls tbody")).to_contain_text("paused")
        await page.goto(console.url + "/#/dashboard")
        await expect(page.locator("#total-lag")).to_have_text("5")
        await expect(page.locator("#charts svg")).to_have_count(2)
        await page.goto(console.url + "/#/groups/WebGroup")
        await page.locator("#reset-offset button").click()  # no time given: now, past every message
        await expect(page.locator("#group-lag")).to_have_text("0")

        # The cluster page shows the master; the access page says ACL is off on this cluster.
        await page.goto(console.url + "/#/cluster")
        await expect(page.locator("#brokers")).to_contain_text("master")
        await expect(page.locator("#brokers")).to_contain_text(cluster.broker_addr)
        await expect(page.locator("#brokers thead")).to_contain_text("replication")
        await page.goto(console.url + "/#/access")
        await expect(page.locator("#acl")).to_contain_text("ACL not enabled")
        await page.goto(console.url + "/#/amqp")
        await expect(page.locator("main")).to_contain_text("no metadata service given")


async def test_an_unreachable_cluster_is_said_so_on_the_page(open_console):
    port = free_port()
    console = await open_console(f"127.0.0.1:{port}")
    async with chromium_page() as (page, expect):
        await page.goto(console.url + "/#/topics")
        await expect(page.locator("#error")).to_be_visible()
        await expect(page.locator("#error")).to_contain_text(f"NameServer 127.0.0.1:{port}")


async def test_a_traced_message_shows_its_timeline_in_a_browser(make_cluster, open_console):
    cluster = await make_cluster(trace_topic_enable=True)
    console = await open_console(cluster.namesrv_addr)
    async with Producer("WebProducer", cluster.namesrv_addr, enable_trace=True) as producer:
        sent = await producer.send(Message("Followed", b"watch me"))

    async def traced():
        return (await console.call("GET", f"/api/messages/{sent.msg_id}/trace"))[0] == 200

    await eventually(traced, 20, "the message's trace")
    async with chromium_page() as (page, expect):
        await page.goto(f"{console.url}/#/messages?topic=Followed&id={sent.msg_id}")
        await expect(page.locator("#found")).to_contain_text("watch me")
        await page.get_by_role("button", name="Trace").click()
        first = page.locator("#trace .timeline li").first
        await expect(first).to_contain_text("sent by WebProducer to Followed")
        await expect(page.locator("#trace")).to_contain_text("stored on")


async def test_a_user_and_rule_made_in_the_acl_page_are_enforced(secure_console):
    cluster, console = secure_console
    for topic in ("Allowed", "Other"):
        await console.post("/api/topics", {"topic": topic, "queues": 1})
    async with chromium_page() as (page, expect):
        await page.goto(console.url + "/#/access")
        await expect(page.locator("#acl-users")).to_contain_text("Super")
        user = page.locator("#create-user")
        await user.locator("input[name=username]").fill("webuser")
        await user.locator("input[name=password]").fill("web-secret")
        await user.locator("button").click()
        await expect(page.locator("#acl-users")).to_contain_text("webuser")
        rule = page.locator("#create-rule")
        await rule.locator("select[name=user]").select_option("webuser")
        await rule.locator("input[name=resources]").fill("Topic:Allowed")
        await rule.get_by_label("Pub").check()
        await rule.locator("button").click()
        await expect(page.locator("#acl-rules tbody tr")).to_have_count(1)
        await expect(page.locator("#acl-rules")).to_contain_text("Topic:Allowed")
        assert "web-secret" not in await page.content()

    await send_as(cluster.namesrv_addr, "webuser", "web-secret", "Allowed")
    with pytest.raises(ClientError, match="no permission"):
        await send_as(cluster.namesrv_addr, "webuser", "web-secret", "Other")


async def test_topic_change_group_create_and_delete_and_broker_settings_in_a_browser(cluster_console):
    cluster, console = cluster_console
    await console.post("/api/topics", {"topic": "Resized", "queues": 1})
    async with chromium_page() as (page, expect):
        await page.goto(console.url + "/#/topics/Resized")
        await expect(page.locator("#status tbody tr")).to_have_count(1)
        edit = page.locator("#edit-topic")
        await edit.locator("input[name=queues]").fill("3")
        await edit.locator("select[name=perm]").select_option("4")
        await edit.locator("button").click()
        await expect(page.locator("#status tbody tr")).to_have_count(3)
        config = cluster.broker.topics.get("Resized")
        assert (config.write_queue_nums, config.perm) == (3, 4)
        await expect(page.locator("#topic-consumers")).to_have_text("None online.")

        await page.goto(console.url + "/#/groups")
        await page.locator("#create-group input[name=group]").fill("WebMade")
        await page.locator("#create-group button").click()
        await expect(page).to_have_url(re.compile(r"#/groups/WebMade$"))
        assert cluster.broker.groups.find("WebMade") is not None
        page.on("dialog", lambda dialog: dialog.accept())
        await page.locator("#delete-group").click()
        await expect(page).to_have_url(re.compile(r"#/groups$"))
        assert cluster.broker.groups.find("WebMade") is None

        await page.goto(console.url + "/#/cluster")
        await page.get_by_role("button", name="Settings").click()
        await expect(page.locator("#settings")).to_contain_text("brokerName")
        await expect(page.locator("#settings")).to_contain_text(cluster.broker.config.broker_name)
