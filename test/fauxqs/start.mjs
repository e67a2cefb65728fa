// Starts fauxqs, a local SQS-compatible server, for sluice's tests and the
// distributed-mode demo.
//
//   node start.mjs [port]          (or FAUXQS_PORT=port node start.mjs)
//
// The port defaults to 4566; 0 picks a free one. The server listens on the
// loopback address only (FAUXQS_BIND overrides it) and prints one line,
//
//   fauxqs ready http://127.0.0.1:PORT
//
// once it accepts requests; GET /health answers {"status":"ok"} from then on.
// SIGINT or SIGTERM stops it. All state is in memory.
//
// Why buildApp and not startFauxqs: fauxqs's startFauxqs({port, logger})
// always listens on 0.0.0.0 (fauxqs 1.9.2 dist/app.js: app.listen({port,
// host: "0.0.0.0"}); its `host` option only changes the host written into
// queue URLs). buildApp is the same package's exported API that startFauxqs
// wraps (same routes, stores and /health); listening on it ourselves lets us
// bind to loopback, so tests never expose an unauthenticated queue server to
// the network. Request logging is off (the CLI forces it on).
//
// Queue URLs the server returns carry the host sqs.<region>.localhost, which
// does not resolve everywhere: clients must send every request to the
// endpoint (the SDK's BaseEndpoint) and use the URL's path only.
import { buildApp } from "fauxqs";

const arg = process.argv[2] ?? process.env.FAUXQS_PORT ?? "4566";
const port = Number.parseInt(arg, 10);
if (!Number.isInteger(port) || port < 0 || port > 65535 || String(port) !== arg.trim()) {
  console.error(`start.mjs: bad port ${JSON.stringify(arg)}`);
  process.exit(2);
}
const bind = process.env.FAUXQS_BIND ?? "127.0.0.1";

const app = buildApp({ logger: false });
let address;
try {
  address = await app.listen({ port, host: bind });
} catch (err) {
  console.error(`start.mjs: listen on ${bind}:${port}: ${err.message}`);
  process.exit(1);
}
console.log(`fauxqs ready ${address}`);

let stopping = false;
async function stop(signal) {
  if (stopping) return;
  stopping = true;
  try {
    await app.close();
  } finally {
    process.exit(signal === "SIGINT" ? 130 : 0);
  }
}
process.on("SIGINT", () => stop("SIGINT"));
process.on("SIGTERM", () => stop("SIGTERM"));
