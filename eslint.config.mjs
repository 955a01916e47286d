// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'out/**', 'node_modules/**', '.e2e-cache/**', 'test/fixtures/**', '**/*.js', '**/*.mjs', '**/*.cjs', 'scripts/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: { allowDefaultProject: [] }, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/naming-convention': ['warn', { selector: 'class', format: ['PascalCase'] }],
      'no-restricted-imports': 'off',
      eqeqeq: ['error', 'always', { null: 'ignore' }],
    },
  },
  {
    // Engines never import vscode (DESIGN.md): they are plain Node modules used by the CLI too.
    files: ['src/gpu/**', 'src/lint/**', 'src/training/**', 'src/tuning/**', 'src/common/**', 'webview-ui/**'],
    rules: { 'no-restricted-imports': ['error', { paths: [{ name: 'vscode', message: 'Engines and the webview must not import vscode.' }] }] },
  },
);
