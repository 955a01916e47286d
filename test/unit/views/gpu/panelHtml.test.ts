import assert from 'node:assert/strict';
import { makeNonce, renderPanelHtml } from '../../../../src/views/gpu/panelHtml';

const base = {
  cspSource: 'https://file+.vscode-resource.vscode-cdn.net',
  nonce: 'abcdef0123456789abcdef0123456789',
  scriptUri: 'https://file+.vscode-resource.vscode-cdn.net/ext/dist/webview.js',
  styleUris: ['https://file+.vscode-resource.vscode-cdn.net/ext/dist/uPlot.min.css', 'https://file+.vscode-resource.vscode-cdn.net/ext/media/panel.css'],
};

function csp(html: string): string {
  const m = /<meta http-equiv="Content-Security-Policy" content="([^"]*)">/.exec(html);
  assert.ok(m, 'the page has a CSP meta tag');
  return m[1].replace(/&#39;|&apos;/g, "'");
}

describe('GPU panel page (renderPanelHtml)', () => {
  it('has a strict CSP: nothing by default, scripts only with the nonce, resources only from the webview', () => {
    const policy = csp(renderPanelHtml(base));
    assert.deepEqual(policy.split('; '), [
      "default-src 'none'",
      `script-src 'nonce-${base.nonce}'`,
      `style-src ${base.cspSource}`,
      `img-src ${base.cspSource} data:`,
      `font-src ${base.cspSource}`,
    ]);
    assert.doesNotMatch(policy, /unsafe-(inline|eval)/);
  });

  it('loads only the given script (with the nonce) and style sheets, and no inline script or style', () => {
    const html = renderPanelHtml(base);
    const scripts = [...html.matchAll(/<script\b([^>]*)>/g)].map((m) => m[1]);
    assert.deepEqual(scripts, [` nonce="${base.nonce}" src="${base.scriptUri}"`]);
    const links = [...html.matchAll(/<link rel="stylesheet" href="([^"]*)">/g)].map((m) => m[1]);
    assert.deepEqual(links, base.styleUris);
    assert.doesNotMatch(html, /<style\b/);
    assert.doesNotMatch(html, /\sstyle="/);
    const urls = [...html.matchAll(/https?:\/\/[^\s"')]+/g)].map((m) => m[0]);
    assert.ok(urls.every((u) => u.startsWith(base.cspSource)), `remote content: ${urls.join(', ')}`);
  });

  it('says "waiting" before its script runs, and passes the first-sample timeout to the page', () => {
    const html = renderPanelHtml({ ...base, firstSampleTimeoutMs: 5000 });
    assert.match(html, /Waiting for the first sample…/);
    assert.match(html, /data-first-sample-timeout-ms="5000"/);
    assert.match(renderPanelHtml(base), /data-first-sample-timeout-ms="15000"/);
  });

  it('escapes URIs into attributes and refuses a nonce that could break out of the policy', () => {
    const html = renderPanelHtml({ ...base, scriptUri: 'https://x/a"b<c>.js' });
    assert.match(html, /src="https:\/\/x\/a&quot;b&lt;c&gt;\.js"/);
    assert.throws(() => renderPanelHtml({ ...base, nonce: "x' 'unsafe-inline" }), /nonce/);
  });

  it('makes a fresh 128-bit nonce each time', () => {
    const a = makeNonce();
    assert.match(a, /^[0-9a-f]{32}$/);
    assert.notEqual(makeNonce(), a);
  });
});
