import fs from "node:fs/promises";
import type { APIRequestContext, Page } from "@playwright/test";
import { test, expect } from "./fixtures";
import { screenshotPath, signIn, signedInApi, uniqueTag } from "./helpers";
import { Receiver } from "./receiver";
import { expectAccessible } from "./a11y";

// Export (issue 23, item 4): the Deliveries and Audit pages' Export links download
// every row the page's filters match, as CSV and NDJSON, with the downloader's
// redaction: payloads only for the admin (data:read), the audit trail only for
// operators and admins. This spec's callbacks go to a receiver of its own that
// refuses them (400: failed at once), and its checks look at its own rows by id,
// since other specs' rows share the server.

test.describe.configure({ mode: "serial" });

const tag = uniqueTag("export");
/** Text only the runs' results hold: it must appear in a payload and nowhere else. */
const SECRET_TEXT = `private-export-${tag}`;
/** The longest a delivery may take to settle: a bound for a loaded machine, not a target. */
const SETTLE_MS = 30_000;
const EVENT_COLUMNS = [
  "event_id", "kind", "source", "parent_type", "parent_id", "channel", "destination", "status",
  "attempts", "cycle", "cycle_attempts", "max_attempts", "last_status_code", "last_error",
  "next_attempt_at", "created_at", "updated_at", "completed_at", "failed_at", "uncertain_at",
  "dead_letter_id",
];

const receiver = new Receiver();
let operatorApi: APIRequestContext;
/** This spec's failed callbacks' event ids. */
let failedEvents: string[] = [];

test.beforeAll(async ({ playwright, baseURL }) => {
  receiver.defaults["/refuse"] = 400;
  await receiver.start();
  operatorApi = await signedInApi(playwright, baseURL!, "operator");
  for (let i = 0; i < 2; i++) {
    const created = await operatorApi.post("/api/v1/runs", {
      data: { type: "invoice.sync", tenant: tag, callback_url: receiver.url("/refuse") },
    });
    expect(created.status()).toBe(201);
    const run = await created.json();
    const done = await operatorApi.post(`/api/v1/runs/${run.id}/transitions`, {
      data: { to: "succeeded", result: { note: SECRET_TEXT } },
    });
    expect(done.status()).toBe(200);
    // The precondition: the callback failed (the receiver refused it).
    let failed: { event_id: string; status: string } | undefined;
    await expect
      .poll(
        async () => {
          const resp = await operatorApi.get(`/api/v1/runs/${run.id}/deliveries`);
          const list = (await resp.json()) as { event_id: string; kind: string; status: string }[];
          failed = list.find((d) => d.kind === "callback");
          return failed?.status;
        },
        { timeout: SETTLE_MS },
      )
      .toBe("failed");
    failedEvents.push(failed!.event_id);
  }
});

test.afterAll(async () => {
  await operatorApi?.dispose();
  await receiver.stop();
});

/** RFC 4180 records (quoted cells may hold commas, quotes and line breaks). */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let cell = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; }
      else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { record.push(cell); cell = ""; }
    else if (c === "\n") { record.push(cell); records.push(record); record = []; cell = ""; }
    else if (c !== "\r") cell += c;
  }
  if (cell || record.length) { record.push(cell); records.push(record); }
  return records;
}

/** Clicks an Export link and reads the file the browser saved. */
async function download(page: Page, testId: string) {
  const saved = page.waitForEvent("download");
  await page.getByTestId(testId).click();
  const file = await saved;
  return { name: file.suggestedFilename(), text: await fs.readFile((await file.path())!, "utf8") };
}

/** A CSV's rows as objects by header name. */
function rowsOf(text: string) {
  const [header, ...records] = parseCsv(text);
  return { header, rows: records.map((r) => Object.fromEntries(header.map((h, i) => [h, r[i]]))) };
}

test("an operator exports the filtered Deliveries view as CSV and NDJSON, without payloads", async ({ page }) => {
  await signIn(page, "operator", "/deliveries?status=failed&kind=callback");
  await expect(page.getByTestId("deliveries-table")).toBeVisible();
  const csvLink = page.getByTestId("export-csv");
  await expect(csvLink).toHaveAttribute("href", "/deliveries/export?format=csv&kind=callback&status=failed");
  await expectAccessible(page, "deliveries with export links");
  await csvLink.scrollIntoViewIfNeeded();
  await page.screenshot({ path: screenshotPath("deliveries-export.png") });

  const csv = await download(page, "export-csv");
  expect(csv.name).toMatch(/^herald-events-\d{8}-\d{6}\.csv$/);
  const { header, rows } = rowsOf(csv.text);
  expect(header).toEqual(EVENT_COLUMNS);
  // Every row matches the page's filter; this spec's failed callbacks are there.
  expect(rows.length).toBeGreaterThanOrEqual(failedEvents.length);
  for (const row of rows) expect([row.status, row.kind]).toEqual(["failed", "callback"]);
  const mine = rows.filter((r) => failedEvents.includes(r.event_id));
  expect(mine.map((r) => r.event_id).sort()).toEqual([...failedEvents].sort());
  for (const row of mine) {
    expect(row.destination).toBe(`http://127.0.0.1:${receiver.port}`);
    expect(row.last_status_code).toBe("400");
  }
  expect(csv.text).not.toContain(SECRET_TEXT);

  const ndjson = await download(page, "export-ndjson");
  expect(ndjson.name).toMatch(/^herald-events-\d{8}-\d{6}\.ndjson$/);
  // Other specs' deliveries may change between the two downloads: this spec's own
  // are compared, every line is held to the filter.
  const lines = ndjson.text.trim().split("\n").map((l) => JSON.parse(l));
  for (const line of lines) {
    expect([line.status, line.kind, line.payload]).toEqual(["failed", "callback", undefined]);
  }
  expect(lines.filter((l) => failedEvents.includes(l.event_id)).map((l) => l.event_id).sort()).toEqual(
    [...failedEvents].sort(),
  );
});

test("the admin's export carries payloads; a reader's is redacted", async ({ page, browser }) => {
  await signIn(page, "admin", "/deliveries?status=failed&kind=callback");
  const csv = await download(page, "export-csv");
  const { header, rows } = rowsOf(csv.text);
  expect(header).toEqual([...EVENT_COLUMNS, "payload"]);
  const mine = rows.filter((r) => failedEvents.includes(r.event_id));
  expect(mine).toHaveLength(failedEvents.length);
  for (const row of mine) expect(row.payload).toContain(SECRET_TEXT);

  const readerContext = await browser.newContext();
  const reader = await readerContext.newPage();
  await signIn(reader, "reader", "/deliveries?status=failed&kind=callback");
  const redacted = rowsOf((await download(reader, "export-csv")).text);
  expect(redacted.header).toEqual(EVENT_COLUMNS);
  expect(redacted.rows.filter((r) => failedEvents.includes(r.event_id))).toHaveLength(failedEvents.length);
  await readerContext.close();
});

test("a view with no rows offers no export", async ({ page }) => {
  await signIn(page, "operator", `/deliveries?status=all&kind=${tag}`);
  await expect(page.getByTestId("deliveries-empty")).toBeVisible();
  await expect(page.getByTestId("export-csv")).toHaveCount(0);
});

test("an operator exports the audit trail; a reader is refused, page and forged call", async ({ page, playwright, baseURL }) => {
  // An audited action of this spec's own: a retry of one failed callback.
  const retried = failedEvents[0];
  const retry = await operatorApi.post(`/api/v1/deliveries/${retried}/retry`, {
    data: { kind: "callback", expected_status: "failed" },
  });
  expect(retry.status()).toBe(200);

  await signIn(page, "operator", "/audit");
  const row = page.locator(`[data-testid=audit-row][data-event-id="${retried}"]`);
  await expect(row).toBeVisible();
  // A delivery's long id is cut to its column, never over the next one.
  for (const width of [1280, 1920]) {
    await page.setViewportSize({ width, height: 900 });
    const spilling = await row.locator("td").evaluateAll((cells) => cells.filter((c) => c.scrollWidth > c.clientWidth + 1).length);
    expect(spilling, `cells spilling at ${width} px`).toBe(0);
    await expect(row.getByTestId("long-id")).toHaveAttribute("title", retried);
  }
  await expect(page.getByTestId("export-csv")).toHaveAttribute("href", "/audit/export?format=csv");
  await expectAccessible(page, "audit with export links");
  const csv = await download(page, "export-csv");
  expect(csv.name).toMatch(/^herald-audit-\d{8}-\d{6}\.csv$/);
  const { header, rows } = rowsOf(csv.text);
  expect(header).toEqual(["id", "event_id", "action", "actor", "from_status", "acknowledged_duplicate_risk", "affected", "at", "reason"]);
  const entry = rows.find((r) => r.event_id === retried);
  expect(entry).toMatchObject({ action: "retry", actor: "operator", from_status: "failed", affected: "1" });
  const ndjson = await download(page, "export-ndjson");
  const lines = ndjson.text.trim().split("\n").map((l) => JSON.parse(l));
  expect(lines.find((l) => l.event_id === retried)).toMatchObject({ id: entry!.id, actor: "operator", affected: 1 });

  const readerContext = await page.context().browser()!.newContext();
  const reader = await readerContext.newPage();
  await signIn(reader, "reader", "/runs");
  await reader.goto("/audit");
  await expect(reader.getByTestId("error-state")).toHaveAttribute("data-status", "403");
  await expect(reader.getByTestId("export-csv")).toHaveCount(0);
  await readerContext.close();
  const readerApi = await signedInApi(playwright, baseURL!, "reader");
  const forged = await readerApi.get("/audit/export?format=csv");
  expect(forged.status()).toBe(403);
  expect((await forged.json()).message).toContain("runs:write");
  await readerApi.dispose();
});
