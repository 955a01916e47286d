/**
 * A tree cursor that calls web-tree-sitter's wasm functions directly. web-tree-sitter's own
 * `TreeCursor` keeps the cursor's state in JS and copies it into wasm memory and back around
 * every call (eight `setValue`/`getValue`s, each a switch on a type string and a DataView access):
 * that copying was most of `toSyntax`'s time, itself a fifth of a whole-file lint. The wasm
 * functions read the cursor from one transfer buffer and write it back there, so a walk that
 * makes no other call into tree-sitter meanwhile can leave it there and skip the copies.
 *
 * The functions are those of the emscripten module web-tree-sitter 0.27 loads (its
 * `lib/tree-sitter.c`: `ts_tree_cursor_*_wasm`), which the package does not export: the module
 * is found as the `this` of a parse callback (the binding calls `Module.currentParseCallback(…)`).
 * When it cannot be found, lacks a function, or converts a sample differently from the public
 * cursor (`syntax.ts` checks once), the public `TreeCursor` is used: slower, the same result.
 */
import { Parser, type Language, type Tree } from 'web-tree-sitter';

/** What `toSyntax` uses of a cursor: the subset of web-tree-sitter's `TreeCursor` both kinds have. */
export interface Cursor {
  readonly nodeTypeId: number;
  readonly currentFieldId: number;
  readonly startIndex: number;
  readonly endIndex: number;
  readonly currentDepth: number;
  gotoFirstChild(): boolean;
  gotoNextSibling(): boolean;
  gotoParent(): boolean;
  gotoDescendant(index: number): void;
  delete(): void;
}

/** The emscripten module's cursor functions; each takes the tree's address and reads the cursor from the transfer buffer. */
interface Binding {
  _ts_tree_root_node_wasm(tree: number): void;
  _ts_tree_cursor_new_wasm(tree: number): void;
  _ts_tree_cursor_delete_wasm(tree: number): void;
  _ts_tree_cursor_goto_first_child_wasm(tree: number): number;
  _ts_tree_cursor_goto_next_sibling_wasm(tree: number): number;
  _ts_tree_cursor_goto_parent_wasm(tree: number): number;
  _ts_tree_cursor_goto_descendant_wasm(tree: number, index: number): void;
  _ts_tree_cursor_current_node_type_id_wasm(tree: number): number;
  _ts_tree_cursor_current_field_id_wasm(tree: number): number;
  _ts_tree_cursor_start_index_wasm(tree: number): number;
  _ts_tree_cursor_end_index_wasm(tree: number): number;
  _ts_tree_cursor_current_depth_wasm(tree: number): number;
}

const needed: readonly (keyof Binding)[] = [
  '_ts_tree_root_node_wasm',
  '_ts_tree_cursor_new_wasm',
  '_ts_tree_cursor_delete_wasm',
  '_ts_tree_cursor_goto_first_child_wasm',
  '_ts_tree_cursor_goto_next_sibling_wasm',
  '_ts_tree_cursor_goto_parent_wasm',
  '_ts_tree_cursor_goto_descendant_wasm',
  '_ts_tree_cursor_current_node_type_id_wasm',
  '_ts_tree_cursor_current_field_id_wasm',
  '_ts_tree_cursor_start_index_wasm',
  '_ts_tree_cursor_end_index_wasm',
  '_ts_tree_cursor_current_depth_wasm',
];

let found: Binding | null | undefined;

/** The emscripten module, found once (null when it cannot be). */
function bindingFor(language: Language): Binding | null {
  if (found !== undefined) return found;
  found = null;
  let module: unknown;
  const parser = new Parser();
  try {
    parser.setLanguage(language);
    // The binding calls the callback as a method of the module: `Module.currentParseCallback(index, point)`.
    parser.parse(function (this: unknown): undefined {
      // eslint-disable-next-line @typescript-eslint/no-this-alias -- the module is what is looked for
      module ??= this;
      return undefined;
    })?.delete();
  } catch {
    module = undefined;
  } finally {
    parser.delete();
  }
  if (typeof module === 'object' && module !== null && needed.every((f) => typeof (module as Record<string, unknown>)[f] === 'function')) found = module as Binding;
  return found;
}

/**
 * A cursor on the tree's root whose state stays in wasm memory between calls: valid only while
 * nothing else calls into tree-sitter, and `delete` must be called when the walk is done.
 */
export class WasmCursor implements Cursor {
  constructor(
    private readonly b: Binding,
    private readonly t: number,
  ) {
    b._ts_tree_root_node_wasm(t);
    b._ts_tree_cursor_new_wasm(t);
  }

  get nodeTypeId(): number {
    return this.b._ts_tree_cursor_current_node_type_id_wasm(this.t);
  }

  get currentFieldId(): number {
    return this.b._ts_tree_cursor_current_field_id_wasm(this.t);
  }

  get startIndex(): number {
    return this.b._ts_tree_cursor_start_index_wasm(this.t);
  }

  get endIndex(): number {
    return this.b._ts_tree_cursor_end_index_wasm(this.t);
  }

  get currentDepth(): number {
    return this.b._ts_tree_cursor_current_depth_wasm(this.t);
  }

  gotoFirstChild(): boolean {
    return this.b._ts_tree_cursor_goto_first_child_wasm(this.t) === 1;
  }

  gotoNextSibling(): boolean {
    return this.b._ts_tree_cursor_goto_next_sibling_wasm(this.t) === 1;
  }

  gotoParent(): boolean {
    return this.b._ts_tree_cursor_goto_parent_wasm(this.t) === 1;
  }

  gotoDescendant(index: number): void {
    this.b._ts_tree_cursor_goto_descendant_wasm(this.t, index);
  }

  delete(): void {
    this.b._ts_tree_cursor_delete_wasm(this.t);
  }
}

/** A cursor on the tree's root: the direct one when `direct` and the module was found, else web-tree-sitter's own. */
export function openCursor(tree: Tree, direct: boolean): Cursor {
  const binding = direct ? bindingFor(tree.language) : null;
  // A Tree's wasm address is its element 0 (web-tree-sitter's internal handle).
  const address = (tree as unknown as { readonly 0: number })[0];
  if (binding && typeof address === 'number' && address !== 0) return new WasmCursor(binding, address);
  return tree.walk();
}
