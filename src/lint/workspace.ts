/**
 * The workspace index: every parsed file's functions, classes and call sites by name, so
 * that a fact can cross functions and files (a guard in a caller three levels up, a
 * `@contextmanager` that wraps `no_grad` in utils.py, a meter whose `update` appends).
 */
import { FileModel, type CallSite, type ClassInfo, type FunctionInfo, type ValueReference, type WorkspaceFacts } from './model';
import type { ChunkIndex } from './model/types';
import type { SyntaxNode } from './syntax';
import { recorded, recordingNow, replay, track, unrecorded } from './deps';
import { accumulatedParams, touchesTorch } from './model/summaries';
import { flatCopy } from './text';

type ByName<T> = Map<string, Map<string, T[]>>;

/** An empty list of a statement's entries (`entriesOf`), shared. */
const none: readonly never[] = Object.freeze([]);

function add<T>(index: ByName<T>, name: string, path: string, value: T): void {
  let perFile = index.get(name);
  // A new key is a copy: a name sliced from the source would keep that whole text alive as long as the key lives.
  if (!perFile) index.set(flatCopy(name), (perFile = new Map<string, T[]>()));
  const list = perFile.get(path) ?? [];
  list.push(value);
  perFile.set(path, list);
}

/** Takes `path`'s entries out of the index; a name nothing defines any more goes too. */
function drop<T>(index: ByName<T>, names: Iterable<string>, path: string): void {
  for (const n of names) {
    const perFile = index.get(n);
    if (perFile?.delete(path) && perFile.size === 0) index.delete(n);
  }
}

/** Everything by that name, files in path order: answers must not depend on the order files were (re)indexed in. */
function all<T>(index: ByName<T>, name: string): T[] {
  const perFile = index.get(name);
  if (!perFile) return [];
  if (perFile.size < 2) return [...perFile.values()].flat();
  return [...perFile.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).flatMap(([, list]) => list);
}

/**
 * The parameters (without `self`) that `cls.method` accumulates into `self`. A fact of the
 * class's own text (and its file's imports), kept on the class across re-lints.
 */
function classAccumulates(cls: ClassInfo, method: string): readonly number[] | undefined {
  const aliases = cls.model.aliasSignature();
  if (cls.accumulating?.aliases !== aliases) cls.accumulating = { aliases, params: new Map() };
  const known = cls.accumulating.params;
  if (known.has(method)) return known.get(method);
  let result: readonly number[] | undefined;
  const fn = cls.methods.get(method);
  if (fn?.body) {
    // The parameters whose value reaches `self.x += ...` (through loops over them: `for v in values`), not as `.item()`.
    const params = fn.params.slice(1);
    const found = new Set<number>();
    for (const { into, from } of accumulatedParams(fn)) if (into === 'self' && params.includes(from)) found.add(params.indexOf(from));
    if (found.size) result = [...found].sort((a, b) => a - b);
  }
  known.set(method, result);
  return result;
}

/** The current version of one file, shared by that file's index entries: a new version updates it once, not every entry. */
interface FileHolder {
  model: FileModel | undefined;
}

/** A call site in the index: its model is the file's current version (a statement's entries are reused by later versions). */
class SiteEntry {
  constructor(
    private readonly file: FileHolder,
    readonly call: SyntaxNode,
    /** The statement it came from (`chunkOf`); undefined for a file indexed whole. */
    readonly chunk?: ChunkIndex,
  ) {}

  get model(): FileModel {
    return this.file.model as FileModel;
  }
}

/** A reference in the index, with its file's current version like `SiteEntry`. */
class RefEntry {
  constructor(
    private readonly file: FileHolder,
    readonly node: SyntaxNode,
    /** The statement it came from (`chunkOf`); undefined for a file indexed whole. */
    readonly chunk?: ChunkIndex,
  ) {}

  get model(): FileModel {
    return this.file.model as FileModel;
  }
}

/** What one statement of a file puts in the index, by name. */
interface ChunkEntries {
  readonly functions: readonly [string, FunctionInfo][];
  readonly classes: readonly [string, ClassInfo][];
  readonly sites: readonly [string, SiteEntry][];
  readonly refs: readonly [string, RefEntry][];
}

type Kind = 'functions' | 'classes' | 'sites' | 'refs';
const kinds: readonly Kind[] = ['functions', 'classes', 'sites', 'refs'];

export class Workspace implements WorkspaceFacts {
  /** Bumped on every change; FileModels drop facts computed under an older generation. */
  generation = 0;
  private readonly files = new Map<string, FileModel>();
  /** Per path ever indexed, its current model (none once removed), read by its index entries. */
  private readonly holders = new Map<string, FileHolder>();
  private readonly functions: ByName<FunctionInfo> = new Map();
  private readonly classes: ByName<ClassInfo> = new Map();
  private readonly sites: ByName<CallSite> = new Map();
  private readonly refs: ByName<ValueReference> = new Map();
  private readonly namesByFile = new Map<string, Record<Kind, Set<string>>>();
  /**
   * Each statement's entries (`ChunkEntries`), and the statement each function or class entry
   * came from (a call site's or reference's entry holds its own: one weak-map entry per call
   * and reference was most of the index's time and a weight on every garbage collection).
   */
  private readonly chunkEntries = new WeakMap<ChunkIndex, ChunkEntries>();
  private readonly entryChunk = new WeakMap<object, ChunkIndex>();
  private memo = new Map<string, { v: unknown; deps: Set<string> | undefined }>();
  /** `all(index, name)` per index and name, for the current generation: asked per call, it sorted and copied each time. */
  private lists = new Map<ByName<unknown>, Map<string, readonly unknown[]>>();
  private listsGeneration = -1;
  private memoGeneration = -1;
  /** The latest change, and the latest change to any other file than that one, for `changedOutside`. */
  private last = { path: '', generation: 0 };
  private lastOther = 0;

  get(path: string): FileModel | undefined {
    return this.files.get(path);
  }

  paths(): string[] {
    return [...this.files.keys()];
  }

  /** @param perStatement keep each statement's entries, so that a new version of a file updates only the names of the statements it changed (the language server); the CLI indexes each file once. */
  constructor(private readonly perStatement = true) {}

  set(model: FileModel): void {
    const old = this.files.get(model.path);
    if (!this.perStatement) this.setWhole(model);
    else {
      if (!old || !this.setChanged(model, old)) this.setWhole(model, model.chunkList());
    }
    this.generation++;
    this.noteChange(model.path);
  }

  /** Indexes the whole file again. */
  private setWhole(model: FileModel, chunks?: readonly ChunkIndex[]): void {
    this.remove(model.path);
    this.files.set(model.path, model);
    const file = this.holderOf(model);
    const names: Record<Kind, Set<string>> = { functions: new Set(), classes: new Set(), sites: new Set(), refs: new Set() };
    if (chunks) {
      for (const chunk of chunks) {
        const entries = this.entriesOf(model, chunk);
        for (const kind of kinds) {
          const list = entries[kind];
          if (list.length === 0) continue;
          const index = this.index(kind);
          for (let i = 0; i < list.length; i++) {
            const [name, entry] = list[i];
            add(index, name, model.path, entry);
            names[kind].add(name);
          }
        }
      }
    } else {
      for (const fn of model.functions) {
        add(this.functions, fn.name, model.path, fn);
        names.functions.add(fn.name);
      }
      for (const cls of model.classes) {
        add(this.classes, cls.name, model.path, cls);
        names.classes.add(cls.name);
      }
      for (const { name, call } of model.callSiteNames()) {
        add(this.sites, name, model.path, new SiteEntry(file, call));
        names.sites.add(name);
      }
      for (const { name, node } of model.valueReferenceNames()) {
        add(this.refs, name, model.path, new RefEntry(file, node));
        names.refs.add(name);
      }
    }
    this.namesByFile.set(model.path, names);
  }

  /** The path's holder, pointed at `model`: every entry of the file (reused statements' too) now answers with it. */
  private holderOf(model: FileModel): FileHolder {
    let file = this.holders.get(model.path);
    if (!file) this.holders.set(model.path, (file = { model }));
    file.model = model;
    return file;
  }

  private index(kind: Kind): ByName<unknown> {
    return this[kind];
  }

  /** A statement's entries, made once per statement (`ChunkEntries`). */
  private entriesOf(model: FileModel, chunk: ChunkIndex): ChunkEntries {
    let entries = this.chunkEntries.get(chunk);
    if (!entries) {
      const file = this.holderOf(model);
      const sites = model.callSiteNamesIn(chunk);
      const refs = model.valueReferenceNamesIn(chunk);
      // Most statements define no function or class, and many call or name nothing: those lists are one shared empty array.
      entries = {
        functions: chunk.functions.length ? chunk.functions.map((f) => [f.name, f]) : none,
        classes: chunk.classes.length ? chunk.classes.map((c) => [c.name, c]) : none,
        sites: sites.length ? sites.map(({ name, call }) => [name, new SiteEntry(file, call, chunk)]) : none,
        refs: refs.length ? refs.map(({ name, node }) => [name, new RefEntry(file, node, chunk)]) : none,
      };
      for (const f of chunk.functions) this.entryChunk.set(f, chunk);
      for (const c of chunk.classes) this.entryChunk.set(c, chunk);
      this.chunkEntries.set(chunk, entries);
    }
    return entries;
  }

  /** The statement an entry of `entriesOf` came from. */
  private chunkOf(e: unknown): ChunkIndex {
    return (e instanceof SiteEntry || e instanceof RefEntry ? e.chunk : this.entryChunk.get(e as object)) as ChunkIndex;
  }

  /**
   * A new version of a file already indexed: only the names of the statements it replaced
   * change, each name's entries kept in document order (statement by statement, as a full
   * index lists them). Answers false, changing nothing, when the version was not made from the
   * indexed one by an edit (`takeChangesSince`) or the replaced statements' entries are not
   * known (then the whole file is indexed again).
   */
  private setChanged(model: FileModel, old: FileModel): boolean {
    const names = this.namesByFile.get(model.path);
    // Only for a version made from the indexed one: it knows which statements it replaced, without a pass over the file.
    const changes = model.takeChangesSince(old);
    if (!names || !changes) return false;
    const { removed, added } = changes;
    // The kept statements' entries were made when an earlier version was indexed; the removed ones' must be known to take them out.
    if (removed.some((c) => !this.chunkEntries.has(c))) return false;
    const gone = new Set(removed);
    // Document order: a kept statement's node has moved to its place in this version.
    const position = (e: unknown): number => this.chunkOf(e).node.start;
    this.files.set(model.path, model);
    this.holderOf(model);
    for (const kind of kinds) {
      const affected = new Map<string, unknown[]>();
      for (const c of removed) for (const [name] of (this.chunkEntries.get(c) as ChunkEntries)[kind]) if (!affected.has(name)) affected.set(name, []);
      for (const c of added) {
        for (const [name, e] of this.entriesOf(model, c)[kind]) {
          const list = affected.get(name);
          if (list) list.push(e);
          else affected.set(name, [e]);
        }
      }
      const index = this.index(kind);
      for (const [name, fresh] of affected) {
        const perFile = index.get(name);
        const list = [...(perFile?.get(model.path) ?? []).filter((e) => !gone.has(this.chunkOf(e))), ...fresh];
        // Stable: the entries of one statement keep their order.
        list.sort((a, b) => position(a) - position(b));
        if (list.length === 0) {
          if (perFile?.delete(model.path) && perFile.size === 0) index.delete(name);
          names[kind].delete(name);
        } else if (perFile) {
          perFile.set(model.path, list);
          names[kind].add(name);
        } else {
          index.set(flatCopy(name), new Map([[model.path, list]]));
          names[kind].add(name);
        }
      }
    }
    return true;
  }

  private noteChange(path: string): void {
    if (path === this.last.path) this.last.generation = this.generation;
    else {
      this.lastOther = this.last.generation;
      this.last = { path, generation: this.generation };
    }
  }

  /** The latest generation at which a file other than `path` was set or removed (0: never). */
  changedOutside(path: string): number {
    return path === this.last.path ? this.lastOther : this.last.generation;
  }

  /** Has any file other than `path` been set or removed since `generation`? */
  changedElsewhere(path: string, generation: number): boolean {
    return this.changedOutside(path) > generation;
  }

  /**
   * How much the index holds: files, and names with an entry (a removed or changed file's
   * names go with it: a server that has seen many files must not keep them all).
   */
  size(): { files: number; functions: number; classes: number; sites: number } {
    return { files: this.files.size, functions: this.functions.size, classes: this.classes.size, sites: this.sites.size };
  }

  remove(path: string): void {
    const names = this.namesByFile.get(path);
    if (!names) return;
    drop(this.functions, names.functions, path);
    drop(this.classes, names.classes, path);
    drop(this.sites, names.sites, path);
    drop(this.refs, names.refs, path);
    this.namesByFile.delete(path);
    this.files.delete(path);
    const file = this.holders.get(path);
    if (file) file.model = undefined;
    this.generation++;
    this.noteChange(path);
  }

  /** `all(index, name)`, kept until the index changes (callers only read the list). */
  private named<T>(index: ByName<T>, name: string): readonly T[] {
    if (this.listsGeneration !== this.generation) {
      this.lists = new Map();
      this.listsGeneration = this.generation;
    }
    let perIndex = this.lists.get(index);
    if (!perIndex) this.lists.set(index, (perIndex = new Map<string, readonly unknown[]>()));
    let list = perIndex.get(name) as readonly T[] | undefined;
    if (!list) perIndex.set(name, (list = all(index, name)));
    return list;
  }

  private cached<T>(key: string, compute: () => T, whileComputing: T): T {
    if (this.memoGeneration !== this.generation) {
      this.memo = new Map();
      this.memoGeneration = this.generation;
    }
    const hit = this.memo.get(key);
    if (hit && (hit.deps || !recordingNow())) {
      replay(hit.deps);
      return hit.v as T;
    }
    // A cycle (class A(B), class B(A)) sees the in-progress answer and stops.
    this.memo.set(key, { v: whileComputing, deps: new Set() });
    const r = recorded(compute);
    this.memo.set(key, { v: r.value, deps: r.deps });
    return r.value;
  }

  isGuardWrapper(name: string): boolean {
    track(`fn:${name}`);
    return this.cached(`wrapper:${name}`, () => all(this.functions, name).some((fn) => fn.model.isGuardWrapper(fn)), false);
  }

  isModuleClass(name: string): boolean {
    track(`cls:${name}`);
    return this.cached(`module:${name}`, () => all(this.classes, name).some((cls) => cls.model.isModuleClassInfo(cls)), false);
  }

  accumulatingParams(className: string, method: string): readonly number[] | undefined {
    track(`cls:${className}`);
    return this.cached(`acc:${className}.${method}`, () => {
      for (const cls of all(this.classes, className)) {
        const found = classAccumulates(cls, method);
        if (found) return found;
      }
      return undefined;
    }, undefined);
  }

  isAccumulatingMethod(method: string): boolean {
    track(`method:${method}`);
    // Which methods accumulate is a fact of each class's own text: a changed class answers for
    // its methods' names (`method:<name>`), so the scan records no lookups of its own.
    const names = this.cached('accumulatingMethods', () => unrecorded(() => {
      const out = new Set<string>();
      for (const perFile of this.classes.values()) {
        for (const list of perFile.values()) {
          // `accumulatingParams(cls.name, m)` is some class of that name's `classAccumulates(c, m)`, and every such class is in this scan.
          for (const cls of list) for (const m of cls.methods.keys()) if (classAccumulates(cls, m)) out.add(m);
        }
      }
      return out;
    }), new Set<string>());
    return names.has(method);
  }

  callSites(name: string): readonly CallSite[] {
    track(`site:${name}`);
    return this.named(this.sites, name);
  }

  /** Where `name` (or `x.name`) is used as a value, not called, across the workspace. */
  valueReferences(name: string): readonly ValueReference[] {
    track(`ref:${name}`);
    return this.named(this.refs, name);
  }

  /** Functions named `name` across the workspace. */
  functionsNamed(name: string): readonly FunctionInfo[] {
    track(`fn:${name}`);
    return this.named(this.functions, name);
  }

  classesNamed(name: string): readonly ClassInfo[] {
    track(`cls:${name}`);
    return this.named(this.classes, name);
  }

  /**
   * Does a file that imports no torch library use the project's own torch code: does it import
   * a function or class (or a module) of a workspace file that uses torch, and is that function
   * or class torch code itself (an `nn.Module`, or code that names a torch library)? Or does it
   * call `.zero_grad()`? Such a file is linted like one that imports torch (issue #13, cause 5);
   * other Python is left alone.
   */
  usesProjectTorch(model: FileModel): boolean {
    if (model.usesTorch) return true;
    return this.cached(`projectTorch:${model.path}`, () => unrecorded(() => {
      // `self.model.zero_grad()`, `optimizer.zero_grad()`: PyTorch's own verb (chainer clears with `cleargrads()`,
      // MXNet and Keras have none), so a trainer that reaches torch only through packages outside the workspace
      // (OpenNMT's onmt/trainer.py) is linted too.
      if (/\.zero_grad\(/.test(model.text)) return true;
      for (const q of new Set(model.aliases.values())) {
        const dotted = q.replace(/^\.+/, '');
        const parts = dotted.split('.');
        // `from engine import evaluate` (a name of module `engine`) or `import engine` / `from pkg import engine` (a module).
        for (const [module, name] of [[parts.slice(0, -1), parts[parts.length - 1]], [parts, undefined]] as [string[], string | undefined][]) {
          if (module.length === 0) continue;
          const file = this.moduleFile(module, model.path);
          if (!file?.usesTorch) continue;
          if (name === undefined) return true;
          const cls = file.classes.find((c) => c.name === name);
          if (cls && (file.isModuleClassInfo(cls) || touchesTorch(file, cls.node))) return true;
          const fn = file.functions.find((f) => f.name === name && !f.cls);
          if (fn && touchesTorch(file, fn.node)) return true;
        }
      }
      return false;
    }), false);
  }

  /** The workspace file of a module (`a.b` -> `.../a/b.py` or `.../a/b/__init__.py`), the one nearest `from`'s folder. */
  private moduleFile(module: readonly string[], from: string): FileModel | undefined {
    const tail = module.join('/');
    let best: FileModel | undefined;
    let bestScore = -1;
    for (const [path, file] of this.files) {
      const p = path.replace(/\\/g, '/');
      if (!(p.endsWith(`/${tail}.py`) || p === `${tail}.py` || p.endsWith(`/${tail}/__init__.py`))) continue;
      // The nearest: the longest common folder prefix with the importing file.
      let score = 0;
      const f = from.replace(/\\/g, '/');
      while (score < p.length && score < f.length && p[score] === f[score]) score++;
      if (score > bestScore) {
        best = file;
        bestScore = score;
      }
    }
    return best;
  }
}

