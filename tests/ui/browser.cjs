// Load Airflow UI pages in headless Chromium (Debian's /usr/bin/chromium, driven by the
// playwright-core that the UI's own pnpm-lock.yaml pins) and report what they rendered.
//
//   node browser.cjs <ui-dir-with-node_modules> <pages.json> <out.json>
//
// pages.json: [{"name", "url", "hover": css|null, "waitFor": css, "read": {key: css}, "screenshot": path|null}]
// out.json:   {name: {key: [innerText, ...]}}
const fs = require("fs");
const path = require("path");

const [uiDir, pagesFile, outFile] = process.argv.slice(2);
const { chromium } = require(path.join(uiDir, "node_modules", "@playwright", "test"));

(async () => {
  const browser = await chromium.launch({
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
  });
  const result = {};
  try {
    const page = await browser.newPage({ viewport: { height: 1100, width: 1400 } });
    for (const spec of JSON.parse(fs.readFileSync(pagesFile, "utf8"))) {
      await page.goto(spec.url, { waitUntil: "domcontentloaded" });
      if (spec.hover) {
        await page.waitForSelector(spec.hover, { timeout: 90000 });
        await page.hover(spec.hover);
      }
      await page.waitForSelector(spec.waitFor, { timeout: 90000 });
      await page.waitForTimeout(500);
      const read = {};
      for (const [key, selector] of Object.entries(spec.read)) {
        read[key] = await page.locator(selector).allInnerTexts();
      }
      result[spec.name] = read;
      if (spec.screenshot) {
        await page.screenshot({ fullPage: false, path: spec.screenshot });
      }
    }
  } finally {
    await browser.close();
  }
  fs.writeFileSync(outFile, JSON.stringify(result, null, 2));
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
