// Drives kafkajs for tests/kafka_listener/e2e/test_kafkajs.py: one operation per run.
//
//   node kafkajs_driver.js '{"op": "...", "bootstrap": "127.0.0.1:PORT", ...}'
//
// prints one JSON line with the outcome ({"ok": ...} or {"error": {...}}) and exits 0; a
// crash or a hang (each operation has a deadline) exits non-zero. Errors are reported with
// kafkajs's own names and types, so the tests see what an application would see.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const args = JSON.parse(process.argv[2])
const kafka = new Kafka({
  clientId: 'cairn-kafkajs-test',
  brokers: [args.bootstrap],
  logLevel: logLevel.NOTHING,
  retry: { retries: 2, initialRetryTime: 100 },
})

function describeError (e) {
  const out = { name: e.name, type: e.type, message: e.message }
  if (Array.isArray(e.errors)) out.errors = e.errors.map(describeError)
  if (Array.isArray(e.groups)) {
    out.groups = e.groups.map(g => ({
      groupId: g.groupId,
      errorCode: g.errorCode,
      type: g.error ? g.error.type : null,
    }))
  }
  return out
}

function deadline (ms, what) {
  return new Promise((resolve, reject) =>
    setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms).unref()
  )
}

// Consume with a group until `expect` messages arrived; `produceAfterFetch` values are sent
// once the consumer's first fetch is done (its start offsets are resolved by then).
async function consume ({ topic, group, fromBeginning, expect, produceAfterFetch }) {
  const consumer = kafka.consumer({ groupId: group, heartbeatInterval: 500 })
  const got = []
  let produced = !produceAfterFetch
  consumer.on(consumer.events.FETCH, async () => {
    if (produced) return
    produced = true
    const producer = kafka.producer()
    await producer.connect()
    await producer.send({ topic, messages: produceAfterFetch.map(value => ({ value })) })
    await producer.disconnect()
  })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning })
  let arrived
  const done = new Promise(resolve => { arrived = resolve })
  await consumer.run({
    eachMessage: async ({ message }) => {
      got.push(message.value.toString())
      if (got.length >= expect) arrived()
    },
  })
  await Promise.race([done, deadline(20000, 'consume')])
  await consumer.disconnect() // commits what it consumed and leaves the group
  return got
}

async function withAdmin (fn) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

const operations = {
  consume,
  resetOffsets: ({ topic, group, earliest }) =>
    withAdmin(admin =>
      Promise.race([
        admin.resetOffsets({ groupId: group, topic, earliest }).then(() => 'returned'),
        deadline(20000, 'resetOffsets'),
      ])
    ),
  fetchOffsets: ({ topic, group }) =>
    withAdmin(async admin => {
      const [found] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
      return found.partitions.map(p => [p.partition, p.offset])
    }),
  createTopics: ({ topic, configs }) =>
    withAdmin(async admin => {
      const created = await admin.createTopics({
        topics: [{ topic, numPartitions: 1, configEntries: configs }],
      })
      return { created, topics: await admin.listTopics() }
    }),
  listTopics: () => withAdmin(admin => admin.listTopics()),
  deleteGroups: ({ groups }) => withAdmin(admin => admin.deleteGroups(groups)),
  // Delete a group while one of its consumers is in it: the answer must be NON_EMPTY_GROUP.
  deleteLiveGroup: async ({ topic, group }) => {
    const consumer = kafka.consumer({ groupId: group, heartbeatInterval: 500 })
    const joined = new Promise(resolve => consumer.on(consumer.events.GROUP_JOIN, resolve))
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    await consumer.run({ eachMessage: async () => {} })
    await Promise.race([joined, deadline(20000, 'join')])
    try {
      return await withAdmin(admin => admin.deleteGroups([group]))
    } finally {
      await consumer.disconnect()
    }
  },
}

operations[args.op](args)
  .then(ok => {
    console.log(JSON.stringify({ ok }))
    process.exit(0)
  })
  .catch(e => {
    console.log(JSON.stringify({ error: describeError(e) }))
    process.exit(0)
  })
