// dashboard.js: drives Debian's chromium (puppeteer-core) through the gpuq
// dashboard for tests/integration/test_dashboard.py. It talks to the test as
// JSON lines: on stdout it says what it saw ({"ev": ...}); on stdin it takes
// commands ({"cmd": "wait_job", "id": ..., "timeout_ms": ...}, {"cmd": "quit"}).
// Environment: GPUQ_URL, GPUQ_KEY, GPUQ_GPUS (comma-separated ids to wait for),
// CHROMIUM (the browser), SHOT (the screenshot's path), WAIT_MS (bound on each wait).
"use strict";

const readline = require("readline");
const puppeteer = require("puppeteer-core");

const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

async function main() {
  const url = process.env.GPUQ_URL;
  const key = process.env.GPUQ_KEY;
  const gpus = (process.env.GPUQ_GPUS || "").split(",").filter(Boolean);
  const waitMs = Number(process.env.WAIT_MS || 20000);
  const errors = [];
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
      "--no-first-run", "--disable-extensions"],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    page.on("console", (m) => { if (m.type() === "error") errors.push("console: " + m.text()); });
    page.on("pageerror", (e) => errors.push("page error: " + e.message));
    const requested = [];
    page.on("request", (r) => requested.push(r.url()));

    const resp = await page.goto(url + "/", { waitUntil: "load", timeout: waitMs });
    say({ ev: "loaded", status: resp.status() });
    await page.type("#key", key);
    await page.click("#connect");
    const t0 = Date.now();
    await page.waitForFunction(
      (ids) => ids.every((id) => document.querySelector(`.gpu[data-gpu="${id}"]`)),
      { timeout: waitMs, polling: 50 }, gpus);
    const shown = await page.$$eval(".gpu", (cards) => cards.map((c) => c.dataset.gpu));
    const keyField = await page.$eval("#key", (e) => e.value);
    say({ ev: "gpus", ids: shown, ms: Date.now() - t0, key_field: keyField, url: page.url() });

    const rl = readline.createInterface({ input: process.stdin });
    for await (const line of rl) {
      const cmd = JSON.parse(line);
      if (cmd.cmd === "wait_job") {
        try {
          await page.waitForSelector(`.job[data-job="${cmd.id}"]`, { timeout: cmd.timeout_ms });
          const seen = await page.evaluate((id) => window.gpuqSeenJobs.get(id), cmd.id);
          const card = await page.$eval(`.job[data-job="${cmd.id}"]`,
            (e) => e.closest(".gpu").dataset.gpu);
          say({ ev: "job", id: cmd.id, seen_ms: seen, gpu: card });
        } catch (e) {
          say({ ev: "job", id: cmd.id, error: String(e.message || e) });
        }
      } else if (cmd.cmd === "shot") {
        await page.screenshot({ path: cmd.path, fullPage: true });
        say({ ev: "shot", path: cmd.path });
      } else if (cmd.cmd === "quit") {
        break;
      }
    }
    rl.close();
    const foreign = requested.filter((u) => !u.startsWith(url) && !u.startsWith("data:"));
    say({ ev: "done", errors, foreign, requests: requested.length });
  } finally {
    await browser.close();
  }
}

main().then(() => process.exit(0), (e) => {
  say({ ev: "fatal", error: String((e && e.stack) || e) });
  process.exit(1);
});
