// kafkajs consumer driver (contract: tests/clients/common.py; the Java twin is
// tests/java/ConsumerDriver.java). Run with NODE_PATH=<peers>/node/node_modules (tests/peers.py).
//
// Args: --bootstrap HOST:PORT --group G --topic T --assignors range,roundrobin --client-id C
//       [--session-timeout-ms N] [--heartbeat-interval-ms N] [--rebalance-timeout-ms N]
//       [--metadata-max-age-ms N (-1: the library's default)]
//       [--security JSON]  {"protocol","mechanism","username","password","cafile","certfile",
//                           "keyfile"} as in tests/clients/common.py: mapped onto kafkajs' `ssl`
//                           and `sasl` options (absent: PLAINTEXT, as before)
// Prints one JSON object per line on stdout:
//   {"event":"started"}
//   {"event":"revoked","partitions":[...]}        kafkajs is eager: when it sees a rebalance
//                                                 (REBALANCING) it gives up everything it owns
//   {"event":"assigned","partitions":[...all owned...],"added":[...],"generation":G,
//    "member_id":"..."}                           after every JoinGroup + SyncGroup (GROUP_JOIN)
//   {"event":"generation","generation":G,"member_id":"..."}   when either changes
//   {"event":"committed","offset":N,"partitions":[...],"generation":G}   after "commit N"
//   {"event":"commit_failed","offset":N,"error":"..."}
//   {"event":"crashed","error":"...","restart":bool}   kafkajs' CRASH event (it restarts itself)
//   {"event":"closed"}
// Stdin: "commit N" commits offset N for every partition this member owns (OffsetCommit with its
// generation and member id); "close", EOF or SIGTERM/SIGINT disconnects the consumer, which
// sends LeaveGroup, and exits 0. SIGKILL leaves the group to the coordinator's session timeout.
//
// Differences from the other drivers, all forced by kafkajs:
// - Assignors: kafkajs' only built-in assigner is its round robin, whose protocol name is
//   "RoundRobinAssigner"; no other client lists that name, so kafkajs members form kafkajs-only
//   groups. --assignors range / roundrobin both map to it; any other name is refused.
// - No static membership (kafkajs has no group.instance.id): --instance-id is refused (exit 2)
//   rather than silently joining as a dynamic member.
// - Logs go to stderr (kafkajs' console logger writes JSON to stdout, which would read as events).
//   GROUPCOORD_DRIVER_LOG=DEBUG|INFO|WARN|ERROR|NOTHING picks the level (default INFO).
// - The generation id is not exposed by kafkajs' consumer API; the driver reads it from the
//   ConsumerGroup instance (kafkajs/src/consumer/consumerGroup), as the aiokafka driver reads
//   consumer._coordinator.

'use strict'

const fs = require('fs')
const readline = require('readline')
const { parseArgs } = require('util')
const { Kafka, logLevel } = require('kafkajs')
const { PartitionAssigners } = require('kafkajs')
const ConsumerGroup = require('kafkajs/src/consumer/consumerGroup')

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n')
}

const sortedInts = xs => [...new Set(xs)].sort((a, b) => a - b)

// The ConsumerGroup that ran the latest join: its generationId / memberId are the group's view.
// GROUP_JOIN is emitted inside joinAndSync, after both are set.
let group = null
const joinAndSync = ConsumerGroup.prototype.joinAndSync
ConsumerGroup.prototype.joinAndSync = function (...args) {
  group = this
  return joinAndSync.apply(this, args)
}

function parse() {
  const int = { type: 'string' }
  const { values } = parseArgs({
    options: {
      bootstrap: { type: 'string' },
      group: { type: 'string' },
      topic: { type: 'string' },
      assignors: { type: 'string', default: 'range' },
      'client-id': { type: 'string', default: 'kafkajs-driver' },
      'instance-id': { type: 'string' },
      'session-timeout-ms': { ...int, default: '10000' },
      'heartbeat-interval-ms': { ...int, default: '500' },
      'rebalance-timeout-ms': { ...int, default: '30000' },
      'metadata-max-age-ms': { ...int, default: '5000' },
      security: { type: 'string' },
    },
  })
  for (const required of ['bootstrap', 'group', 'topic']) {
    if (!values[required]) throw new Error(`--${required} is required`)
  }
  return values
}

function assigners(names) {
  const known = new Set(['range', 'roundrobin'])
  const list = names.split(',').filter(Boolean)
  const unknown = list.filter(n => !known.has(n))
  if (unknown.length > 0) {
    throw new Error(`kafkajs has no assigner for ${unknown.join(',')} (only RoundRobinAssigner)`)
  }
  return [PartitionAssigners.roundRobin]
}

// --security -> kafkajs' client options: `ssl` (true, or the PEM files' contents) and `sasl`
// (its mechanism names are lower case: plain, scram-sha-256, scram-sha-512).
function securityOptions(json) {
  if (!json) return {}
  const s = JSON.parse(json)
  const protocol = s.protocol || 'PLAINTEXT'
  const out = {}
  if (protocol === 'SSL' || protocol === 'SASL_SSL') {
    const ssl = {}
    if (s.cafile) ssl.ca = [fs.readFileSync(s.cafile, 'utf-8')]
    if (s.certfile) ssl.cert = fs.readFileSync(s.certfile, 'utf-8')
    if (s.keyfile) ssl.key = fs.readFileSync(s.keyfile, 'utf-8')
    out.ssl = Object.keys(ssl).length > 0 ? ssl : true
  }
  if (protocol.startsWith('SASL_')) {
    out.sasl = {
      mechanism: (s.mechanism || 'PLAIN').toLowerCase(),
      username: s.username,
      password: s.password,
    }
  }
  return out
}

function stderrLogger() {
  return () => ({ namespace, label, log }) => {
    const { message, ...rest } = log
    const prefix = namespace ? `[${namespace}] ` : ''
    process.stderr.write(
      `${new Date().toISOString()} ${label} ${prefix}${message} ${JSON.stringify(rest)}\n`
    )
  }
}

async function main() {
  let args
  try {
    args = parse()
  } catch (e) {
    process.stderr.write(`kafkajs_driver: ${e.message}\n`)
    return 2
  }
  if (args['instance-id'] !== undefined) {
    process.stderr.write('kafkajs_driver: kafkajs has no static membership (group.instance.id)\n')
    return 2
  }
  const sessionTimeout = Number(args['session-timeout-ms'])
  const heartbeatInterval = Number(args['heartbeat-interval-ms'])
  const rebalanceTimeout = Number(args['rebalance-timeout-ms'])
  const maxAge = Number(args['metadata-max-age-ms'])
  const levelName = (process.env.GROUPCOORD_DRIVER_LOG || 'INFO').toUpperCase()
  const level = logLevel[levelName] ?? logLevel.INFO
  // kafkajs' defaults retry from 300 ms up to 30 s; the tests want sub-second reactions.
  const retry = { initialRetryTime: 100, maxRetryTime: 1000, retries: 20 }

  const kafka = new Kafka({
    clientId: args['client-id'],
    brokers: [args.bootstrap],
    ...securityOptions(args.security),
    logLevel: level,
    logCreator: stderrLogger(),
    connectionTimeout: 3000,
    // A parked JoinGroup waits up to the rebalance timeout; kafkajs gives JoinGroup its own
    // longer timeout, this one covers the rest.
    requestTimeout: Math.max(30000, rebalanceTimeout),
    retry,
  })
  let consumer
  try {
    consumer = kafka.consumer({
      groupId: args.group,
      partitionAssigners: assigners(args.assignors),
      sessionTimeout,
      heartbeatInterval,
      rebalanceTimeout,
      // kafkajs heartbeats between fetches, and a Fetch on an empty partition is answered after
      // maxWaitTimeInMs: keep it well under the heartbeat interval.
      maxWaitTimeInMs: Math.max(50, Math.min(500, Math.floor(heartbeatInterval / 2))),
      ...(maxAge >= 0 ? { metadataMaxAge: maxAge } : {}),
      allowAutoTopicCreation: false,
      retry,
    })
  } catch (e) {
    process.stderr.write(`kafkajs_driver: ${e.message}\n`)
    return 2
  }

  let owned = new Set()
  let last = { generation: undefined, memberId: undefined }
  const noteGeneration = () => {
    if (group === null) return
    const generation = group.generationId
    const memberId = group.memberId
    if (generation !== last.generation || memberId !== last.memberId) {
      last = { generation, memberId }
      emit('generation', { generation, member_id: memberId })
    }
  }
  const { GROUP_JOIN, REBALANCING, HEARTBEAT, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, ({ payload }) => {
    const now = new Set(payload.memberAssignment[args.topic] || [])
    const added = [...now].filter(p => !owned.has(p))
    owned = now
    emit('assigned', {
      partitions: sortedInts(owned),
      added: sortedInts(added),
      generation: group ? group.generationId : null,
      member_id: payload.memberId,
    })
    noteGeneration()
  })
  consumer.on(REBALANCING, () => {
    // Eager protocol: kafkajs re-joins with nothing and gets a fresh assignment.
    const revoked = sortedInts(owned)
    owned = new Set()
    emit('revoked', { partitions: revoked })
  })
  consumer.on(HEARTBEAT, noteGeneration)
  consumer.on(CRASH, ({ payload }) => {
    owned = new Set()
    emit('crashed', { error: String(payload.error), restart: Boolean(payload.restart) })
  })

  let closing = null
  const close = () => {
    if (closing === null) {
      closing = (async () => {
        try {
          await consumer.disconnect() // stop() -> LeaveGroup, then close connections
        } catch (e) {
          process.stderr.write(`kafkajs_driver: disconnect: ${e.message}\n`)
        }
        emit('closed')
        process.exit(0)
      })()
    }
    return closing
  }

  const commit = async offset => {
    const partitions = sortedInts(owned)
    try {
      await consumer.commitOffsets(
        partitions.map(partition => ({ topic: args.topic, partition, offset: String(offset) }))
      )
      emit('committed', {
        offset,
        partitions,
        generation: group ? group.generationId : null,
      })
    } catch (e) {
      emit('commit_failed', { offset, error: `${e.name}: ${e.message}` })
    }
  }

  process.on('SIGTERM', close)
  process.on('SIGINT', close)
  const lines = readline.createInterface({ input: process.stdin })
  lines.on('line', line => {
    const words = line.trim().split(/\s+/)
    if (words[0] === 'close') close()
    else if (words[0] === 'commit' && /^\d+$/.test(words[1] || '')) commit(Number(words[1]))
  })
  lines.on('close', close) // EOF

  await consumer.connect()
  await consumer.subscribe({ topics: [args.topic], fromBeginning: true })
  emit('started')
  // autoCommit off, as in the other drivers: offsets move only on "commit N". The topics are
  // empty, so no batch ever arrives. run() returns after the first join (or a crash, which
  // kafkajs answers by restarting the consumer itself).
  await consumer.run({ autoCommit: false, eachBatch: async () => {} })
  return null
}

main().then(
  code => {
    if (code !== null) process.exit(code)
  },
  e => {
    process.stderr.write(`kafkajs_driver: ${e.stack || e}\n`)
    process.exit(1)
  }
)
