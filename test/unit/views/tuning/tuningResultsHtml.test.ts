import assert from 'node:assert/strict';
import { renderResultsHtml } from '../../../../src/views/tuning/resultsHtml';

const base = {
  cspSource: 'https://file+.vscode-resource.vscode-cdn.net',
  nonce: 'abcdef0123456789abcdef0123456789',
  scriptUri: 'https://file+.vscode-resource.vscode-cdn.net/ext/dist/results.js',
  styleUris: ['https://file+.vscode-resource.vscode-cdn.net/ext/dist/uPlot.min.css'],
  experiment: 'quadratic',
};

describe('Tuning Results page (renderResultsHtml)', () => {
  it('has a strict CSP: nothing by default, scripts only with the nonce, no unsafe-inline or eval', () => {
    const html = renderResultsHtml(base);
    const policy = /<meta http-equiv="Content-Security-Policy" content="([^"]*)">/.exec(html)?.[1];
    assert.deepEqual(policy?.split('; '), [
      "default-src 'none'", `script-src 'nonce-${base.nonce}'`, `style-src ${base.cspSource}`, `img-src ${base.cspSource} data:`, `font-src ${base.cspSource}`,
    ]);
    assert.equal((html.match(/<script/g) ?? []).length, 1);
    assert.match(html, new RegExp(`<script nonce="${base.nonce}" src="${base.scriptUri.replace(/[.+]/g, '\\$&')}"></script>`));
    assert.doesNotMatch(html, /<style|style="/);
  });

  it('escapes the experiment name and refuses a weak nonce', () => {
    const html = renderResultsHtml({ ...base, experiment: 'a<b>&"c"' });
    assert.match(html, /<title>Tuning Results: a&lt;b&gt;&amp;&quot;c&quot;<\/title>/);
    assert.throws(() => renderResultsHtml({ ...base, nonce: 'short' }), /nonce/);
  });
});
