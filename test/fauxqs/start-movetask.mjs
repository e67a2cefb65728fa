// Starts local-aws-sqs, a second SQS-compatible server used for the one
// path fauxqs does not serve: StartMessageMoveTask (whole-queue DLQ
// redrive). Same contract as start.mjs: loopback only, port from argv
// (0 picks a free one), one ready line "fauxqs ready http://127.0.0.1:PORT".
//
//   node start-movetask.mjs [port]
import { createSqsServer } from "local-aws-sqs";

const port = Number.parseInt(process.argv[2] ?? "0", 10);
const server = await createSqsServer({
  port,
  hostname: "127.0.0.1",
  region: "us-east-1",
  accountId: "000000000000",
  emulateQueueCreationLifecycle: false,
});
console.log(`fauxqs ready http://127.0.0.1:${server.address().port}`);
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => server.close(() => process.exit(0)));
}
