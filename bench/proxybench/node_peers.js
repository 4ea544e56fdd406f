// Runs proxay or talkback for bench/peers_bench.py: on 127.0.0.1 only, HTTPS towards the client.
//
//     NODE_PATH=DIR/node_modules NODE_EXTRA_CA_CERTS=ORIGIN-CA node node_peers.js CONFIG.json
//
// CONFIG: {"tool": "proxay"|"talkback", "mode": "record"|"replay", "tapes": DIR,
//          "origin": "https://127.0.0.1:PORT", "key": PEM, "cert": PEM}
//
// Both tools' own servers listen on every interface, so this launcher builds them from their
// documented APIs and binds 127.0.0.1 itself: proxay's RecordReplayServer (what its CLI runs) on
// its own socket, talkback's requestHandler (its "library" mode) behind node's https server,
// handled the way talkback's own server does. Per-request logging is off in both. The first line
// on stdout is "listening on https://127.0.0.1:PORT" once requests can be served.
"use strict";

const fs = require("fs");
const https = require("https");

const config = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const LOOPBACK = "127.0.0.1";

function announce(server) {
  console.log(`listening on https://${LOOPBACK}:${server.address().port}`);
}

function startProxay() {
  const { RecordReplayServer } = require("proxay/dist/server");
  const proxay = new RecordReplayServer({
    initialMode: config.mode,
    tapeDir: config.tapes,
    host: config.origin,
    defaultTapeName: "default",
    enableLogging: false,
    redactHeaders: [],
    preventConditionalRequests: true,
    httpsKey: config.key,
    httpsCert: config.cert,
    ignoreHeaders: [],
    exactRequestMatching: false,
    debugMatcherFails: false,
  });
  // proxay's own start(port) listens on every interface; its net server is the same object.
  proxay.server.listen(0, LOOPBACK, () => announce(proxay.server));
}

async function startTalkback() {
  const talkback = require("talkback");
  const { RecordMode, FallbackMode } = talkback.Options;
  const handler = await talkback.requestHandler({
    host: config.origin,
    path: config.tapes,
    record: config.mode === "record" ? RecordMode.NEW : RecordMode.DISABLED,
    fallbackMode: FallbackMode.NOT_FOUND,
    silent: true,
    summary: false,
  });
  const tls = { key: fs.readFileSync(config.key), cert: fs.readFileSync(config.cert) };
  const server = https.createServer(tls, (raw, res) => {
    const chunks = [];
    raw.on("data", (chunk) => chunks.push(chunk));
    raw.on("end", async () => {
      try {
        const request = { headers: raw.headers, url: raw.url, method: raw.method };
        const answer = await handler.handle({ ...request, body: Buffer.concat(chunks) });
        res.writeHead(answer.status, answer.headers);
        res.end(answer.body);
      } catch (error) {
        console.error("talkback failed:", error);
        res.statusCode = 500;
        res.end();
      }
    });
  });
  server.listen(0, LOOPBACK, () => announce(server));
}

if (config.tool === "proxay") {
  startProxay();
} else if (config.tool === "talkback") {
  startTalkback().catch((error) => {
    console.error("talkback did not start:", error);
    process.exit(1);
  });
} else {
  console.error(`unknown tool ${config.tool}: expected proxay or talkback`);
  process.exit(2);
}
