/**
 * The workspace index: every parsed file's functions, classes and call sites by name, so
 * that a fact can cross functions and files (a guard in a caller three levels up, a
 * `@contextmanager` that wraps `no_grad` in utils.py, a meter whose `update` appends).
 */
import { FileModel, lastName, type CallSite, type ClassInfo, type FunctionInfo, type WorkspaceFacts } from './model';
import { descendants } from './syntax';

type ByName<T> = Map<string, Map<string, T[]>>;

function add<T>(index: ByName<T>, name: string, path: string, value: T): void {
  let perFile = index.get(name);
  if (!perFile) index.set(name, (perFile = new Map<string, T[]>()));
  const list = perFile.get(path) ?? [];
  list.push(value);
  perFile.set(path, list);
}

function all<T>(index: ByName<T>, name: string): T[] {
  const perFile = index.get(name);
  return perFile ? [...perFile.values()].flat() : [];
}

export class Workspace implements WorkspaceFacts {
  /** Bumped on every change; FileModels drop facts computed under an older generation. */
  generation = 0;
  private readonly files = new Map<string, FileModel>();
  private readonly functions: ByName<FunctionInfo> = new Map();
  private readonly classes: ByName<ClassInfo> = new Map();
  private readonly sites: ByName<CallSite> = new Map();
  private readonly namesByFile = new Map<string, { functions: string[]; classes: string[]; sites: string[] }>();
  private memo = new Map<string, unknown>();
  private memoGeneration = -1;

  get(path: string): FileModel | undefined {
    return this.files.get(path);
  }

  paths(): string[] {
    return [...this.files.keys()];
  }

  set(model: FileModel): void {
    this.remove(model.path);
    this.files.set(model.path, model);
    const names = { functions: [] as string[], classes: [] as string[], sites: [] as string[] };
    for (const fn of model.functions) {
      add(this.functions, fn.name, model.path, fn);
      names.functions.push(fn.name);
    }
    for (const cls of model.classes) {
      add(this.classes, cls.name, model.path, cls);
      names.classes.push(cls.name);
    }
    for (const call of model.calls) {
      const callee = model.callee(call);
      if (!callee || (callee.type !== 'identifier' && callee.type !== 'attribute')) continue;
      const name = lastName(model.src(callee));
      add(this.sites, name, model.path, { model, call });
      names.sites.push(name);
    }
    this.namesByFile.set(model.path, names);
    this.generation++;
  }

  remove(path: string): void {
    const names = this.namesByFile.get(path);
    if (!names) return;
    for (const n of names.functions) this.functions.get(n)?.delete(path);
    for (const n of names.classes) this.classes.get(n)?.delete(path);
    for (const n of names.sites) this.sites.get(n)?.delete(path);
    this.namesByFile.delete(path);
    this.files.delete(path);
    this.generation++;
  }

  private cached<T>(key: string, compute: () => T, whileComputing: T): T {
    if (this.memoGeneration !== this.generation) {
      this.memo = new Map();
      this.memoGeneration = this.generation;
    }
    if (this.memo.has(key)) return this.memo.get(key) as T;
    // A cycle (class A(B), class B(A)) sees the in-progress answer and stops.
    this.memo.set(key, whileComputing);
    const v = compute();
    this.memo.set(key, v);
    return v;
  }

  isGuardWrapper(name: string): boolean {
    return this.cached(`wrapper:${name}`, () => all(this.functions, name).some((fn) => fn.model.isGuardWrapper(fn)), false);
  }

  isModuleClass(name: string): boolean {
    return this.cached(`module:${name}`, () => all(this.classes, name).some((cls) => cls.model.isModuleClassInfo(cls)), false);
  }

  accumulatingParams(className: string, method: string): readonly number[] | undefined {
    return this.cached(`acc:${className}.${method}`, () => {
      for (const cls of all(this.classes, className)) {
        const fn = cls.methods.get(method);
        if (!fn?.body) continue;
        const params = fn.params.slice(1);
        const found = new Set<number>();
        for (const stmt of descendants(fn.body, (n) => n.type === 'function_definition')) {
          if (stmt.type !== 'expression_statement') continue;
          const acc = fn.model.accumulation(stmt);
          if (!acc || !fn.model.src(acc.target).startsWith('self.')) continue;
          const used = new Set<string>();
          if (acc.value.type === 'identifier') used.add(fn.model.src(acc.value));
          for (const d of descendants(acc.value)) if (d.type === 'identifier' && d.parent?.type !== 'attribute') used.add(fn.model.src(d));
          for (const d of descendants(acc.value)) if (d.type === 'identifier' && d.parent?.type === 'attribute' && d.field === 'object') used.add(fn.model.src(d));
          params.forEach((p, i) => { if (used.has(p)) found.add(i); });
        }
        if (found.size) return [...found].sort((a, b) => a - b);
      }
      return undefined;
    }, undefined);
  }

  isAccumulatingMethod(method: string): boolean {
    const names = this.cached('accumulatingMethods', () => {
      const out = new Set<string>();
      for (const perFile of this.classes.values()) {
        for (const list of perFile.values()) {
          for (const cls of list) for (const m of cls.methods.keys()) if (this.accumulatingParams(cls.name, m)) out.add(m);
        }
      }
      return out;
    }, new Set<string>());
    return names.has(method);
  }

  callSites(name: string): readonly CallSite[] {
    return all(this.sites, name);
  }

  /** Functions named `name` across the workspace. */
  functionsNamed(name: string): readonly FunctionInfo[] {
    return all(this.functions, name);
  }
}

