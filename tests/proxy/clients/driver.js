// Drives the official RocketMQ 5.x Node.js client (npm rocketmq-client-nodejs) from a test, speaking
// driver.py's protocol: one JSON command per stdin line, one JSON answer per stdout line, in order.
// Durations in the commands are seconds; the client takes milliseconds. The client comes from
// NODE_PATH (its cached environment), and logs to ~/logs/rocketmq/rocketmq_client_nodejs.log.
// Commands: producer {topics}; send {topic, body, tag?, keys?, properties?, group?, deliver_at_s?,
// transaction? ("commit" or "rollback")}; consumer {group, topic, await_s}; receive {max,
// invisible_s}; ack {id}; change {id, invisible_s}; push {group, topic, fail_attempts?, fail_bodies?};
// pushed; quit. A client error answers {"ok": false, "error": <class name>, "message": ...}.
// A watchdog ends the process if the test stops talking to it. With DRIVER_TLS=1 in its environment
// every client is built with sslEnabled (it then trusts the roots grpc-js finds, e.g.
// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
'use strict';

const readline = require('node:readline');
const { ConsumeResult, FilterExpression, Producer, PushConsumer, SimpleConsumer } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const SHUTDOWN_MS = 3000; // a push consumer's shutdown waits for its long polls: bound it
const endpoints = process.argv[2];
const sslEnabled = process.env.DRIVER_TLS === '1';
setTimeout(() => process.exit(3), Number(process.argv[3]) * 1000);

let producer;
let consumer;
let pusher;
const received = new Map(); // message id -> its latest copy (whose receipt handle acks it)
const pushed = [];

function describe(m) {
  return {
    id: m.messageId,
    topic: m.topic,
    body: m.body.toString(),
    tag: m.tag,
    keys: [...m.keys].sort(),
    properties: Object.fromEntries(m.properties),
    attempt: m.deliveryAttempt,
    group: m.messageGroup || null,
    handle: m.receiptHandle,
    deliver_at_ms: m.deliveryTimestamp ? m.deliveryTimestamp.getTime() : null,
    corrupted: m.corrupted === true, // its body digest did not match
  };
}

function subscription(command) {
  return new Map([[command.topic, new FilterExpression(command.tag ?? '*')]]);
}

// Fails each message's first `fail_attempts` deliveries, and those with a body in `fail_bodies`
// always; succeeds otherwise; records every call.
function listener(failAttempts, failBodies) {
  return {
    consume(m) {
      const ok = m.deliveryAttempt > failAttempts && !failBodies.includes(m.body.toString());
      pushed.push({ ...describe(m), ok });
      return ok ? ConsumeResult.SUCCESS : ConsumeResult.FAILURE;
    },
  };
}

async function run(command) {
  switch (command.op) {
    case 'producer':
      producer = new Producer({
        endpoints,
        sslEnabled,
        topics: command.topics,
        checker: { check: async () => TransactionResolution.ROLLBACK },
      });
      await producer.startup();
      return {};
    case 'send': {
      const message = {
        topic: command.topic,
        body: Buffer.from(command.body),
        tag: command.tag,
        keys: command.keys,
        messageGroup: command.group,
        properties: new Map(Object.entries(command.properties ?? {})),
        deliveryTimestamp: command.deliver_at_s === undefined ? undefined : new Date(command.deliver_at_s * 1000),
      };
      if (command.transaction === undefined) {
        return { id: (await producer.send(message)).messageId };
      }
      const transaction = producer.beginTransaction();
      const receipt = await producer.send(message, transaction);
      await (command.transaction === 'commit' ? transaction.commit() : transaction.rollback());
      return { id: receipt.messageId };
    }
    case 'consumer':
      consumer = new SimpleConsumer({
        endpoints,
        sslEnabled,
        consumerGroup: command.group,
        subscriptions: subscription(command),
        awaitDuration: (command.await_s ?? 5) * 1000,
      });
      await consumer.startup();
      return {};
    case 'receive': {
      const messages = await consumer.receive(command.max, command.invisible_s * 1000);
      for (const m of messages) received.set(m.messageId, m);
      return { messages: messages.map(describe) };
    }
    case 'ack':
      await consumer.ack(received.get(command.id));
      return {};
    case 'change': {
      const message = received.get(command.id);
      await consumer.changeInvisibleDuration(message, command.invisible_s * 1000);
      return { handle: message.receiptHandle };
    }
    case 'push':
      pusher = new PushConsumer({
        endpoints,
        sslEnabled,
        consumerGroup: command.group,
        subscriptions: subscription(command),
        messageListener: listener(command.fail_attempts ?? 0, command.fail_bodies ?? []),
      });
      await pusher.startup();
      return {};
    case 'pushed':
      return { messages: [...pushed] };
    default:
      throw new Error(`unknown command ${command.op}`);
  }
}

async function main() {
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const command = JSON.parse(line);
    if (command.op === 'quit') break;
    let answer;
    try {
      answer = { ok: true, ...(await run(command)) };
    } catch (e) {
      // the client's errors are what the test checks
      answer = { ok: false, error: e.constructor.name, message: e.message };
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
  }
  const clients = [pusher, consumer, producer].filter((client) => client !== undefined);
  const shutdown = (async () => { for (const client of clients) await client.shutdown(); })();
  await Promise.race([shutdown, new Promise((resolve) => setTimeout(resolve, SHUTDOWN_MS))]);
  process.exit(0);
}

main();
