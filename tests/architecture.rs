//! The library's shape, checked on its source text (no Redis needed).
//!
//! * Layers import only downward: a module in `src/` may use modules of its
//!   own layer and of lower layers (see [`LAYERS`]), never of a higher one.
//!   `src/lib.rs` is the root and may use anything.
//! * Every module of `src/` has a layer.
//! * No import circle between modules, not even inside one layer.
//! * No function longer than [`MAX_FN_LINES`] lines.
//!
//! Code in `#[cfg(test)]` items (unit tests) is exempt from all three: tests
//! may build their fixtures from the top.
//!
//! The checks read `src/**/*.rs` through a small scanner (at the end of this
//! file) that blanks comments, string and char literals, so doc links such
//! as [`crate::fence`] in rustdoc and `"crate::x"` in strings never count.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

/// The layers, lowest first: a module may use modules of its own layer and
/// of the layers above it in this list.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "pure",
        &[
            "attempts",
            "background",
            "batch",
            "clock",
            "quorum",
            "keys",
            "retry",
            "error",
            "config",
            "stats",
            "owner",
            "redact",
            "server_ids",
            "wait",
            "telemetry",
            "health",
        ],
    ),
    (
        "I/O",
        &[
            "scripts", "epoch", "sentinel", "node", "fanout", "core", "fenced",
        ],
    ),
    ("state", &["lease"]),
    ("services", &["watchdog", "wake", "release", "services"]),
    ("rounds", &["acquire", "fence"]),
    ("handles", &["guard"]),
    (
        "the service",
        &["call", "any_of", "lock", "semaphore", "rwlock"],
    ),
    ("front ends", &["blocking"]),
];

/// The longest a function may be, from the line of `fn` to its closing brace.
const MAX_FN_LINES: usize = 80;

// ---------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------

#[test]
fn every_module_is_in_a_layer() {
    let krate = analyze();
    let mut problems = String::new();
    let mut seen = BTreeMap::new();
    for (index, (name, modules)) in LAYERS.iter().enumerate() {
        for module in *modules {
            if let Some((other, _)) = seen.insert(*module, (index, *name)) {
                let _ = writeln!(
                    problems,
                    "  `{module}` is listed in layer {other} and in layer {index} ({name}): keep it in one layer only"
                );
            }
        }
    }
    for (module, file) in &krate.modules {
        if layer_of(module).is_none() {
            let _ = writeln!(
                problems,
                "  module `{module}` ({file}) is in no layer: add it to a layer in LAYERS in tests/architecture.rs"
            );
        }
    }
    assert!(
        problems.is_empty(),
        "the layer table does not match src/:\n{problems}"
    );
}

#[test]
fn layers_import_only_downward() {
    let krate = analyze();
    let mut upward: Vec<&Ref> = krate
        .refs
        .iter()
        .filter(|r| match (layer_of(&r.from), layer_of(&r.to)) {
            (Some((from, _)), Some((to, _))) => to > from,
            _ => false,
        })
        .collect();
    upward.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    let mut report = String::new();
    for r in &upward {
        let (from_layer, from_name) = layer_of(&r.from).expect("filtered above");
        let (to_layer, to_name) = layer_of(&r.to).expect("filtered above");
        let _ = writeln!(
            report,
            "  {}:{}: `{}` (layer {from_layer}, {from_name}) uses `{}` (layer {to_layer}, {to_name}) via `{}`",
            r.file, r.line, r.from, r.to, r.text
        );
    }
    assert!(
        upward.is_empty(),
        "{} reference(s) go up the layers (a module may use only its own and lower layers of LAYERS in tests/architecture.rs):\n{report}\
         Fix each by moving what the lower module needs down into its layer or below, or by handing it in \
         from above (a parameter, a callback, a trait defined below); do not reorder LAYERS to silence this.",
        upward.len()
    );
}

#[test]
fn no_import_circles() {
    let krate = analyze();
    let mut edges: BTreeMap<&str, BTreeMap<&str, Vec<&Ref>>> = BTreeMap::new();
    for r in &krate.refs {
        edges
            .entry(r.from.as_str())
            .or_default()
            .entry(r.to.as_str())
            .or_default()
            .push(r);
    }
    let graph: BTreeMap<&str, BTreeSet<&str>> = edges
        .iter()
        .map(|(from, tos)| (*from, tos.keys().copied().collect()))
        .collect();
    let mut report = String::new();
    for component in strongly_connected(&graph) {
        if component.len() < 2 {
            continue;
        }
        let members: Vec<&str> = component.iter().copied().collect();
        let _ = writeln!(report, "  circle among {}:", members.join(", "));
        for cycle in shortest_cycles(&graph, &component) {
            let _ = writeln!(report, "    {}", cycle.join(" -> "));
        }
        let _ = writeln!(
            report,
            "    references inside it (cut at least one of each cycle):"
        );
        for from in &component {
            for (to, refs) in &edges[from] {
                if !component.contains(to) {
                    continue;
                }
                let first = refs[0];
                let more = match refs.len() {
                    1 => String::new(),
                    n => format!(" (and {} more)", n - 1),
                };
                let _ = writeln!(
                    report,
                    "      {from} -> {to}: {}:{} `{}`{more}",
                    first.file, first.line, first.text
                );
            }
        }
    }
    assert!(
        report.is_empty(),
        "modules of src/ import each other in a circle:\n{report}\
         Fix: keep references one-way; move what both sides need into a lower module, \
         or hand it in from the user's side instead of importing it."
    );
}

#[test]
fn no_long_functions() {
    let krate = analyze();
    let mut long = Vec::new();
    for file in &krate.files {
        for span in fn_spans(&file.toks) {
            let lines = span.end_line - span.line + 1;
            if lines > MAX_FN_LINES {
                long.push((lines, &file.rel, span));
            }
        }
    }
    long.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2.line).cmp(&(b.1, b.2.line))));
    let mut report = String::new();
    for (lines, rel, span) in &long {
        let _ = writeln!(
            report,
            "  {rel}:{}: fn {} is {lines} lines",
            span.line, span.name
        );
    }
    assert!(
        long.is_empty(),
        "{} function(s) in src/ are longer than {MAX_FN_LINES} lines (from `fn` to its closing brace):\n{report}\
         Fix: split each into named steps (helper functions or methods) of at most {MAX_FN_LINES} lines.",
        long.len()
    );
}

// ---------------------------------------------------------------------------
// The crate, as the checks see it
// ---------------------------------------------------------------------------

/// A reference from one module to another (never to itself, never from or to
/// the root).
#[derive(Debug)]
struct Ref {
    file: String,
    line: usize,
    from: String,
    to: String,
    /// The path as written (`crate::lock::LockShared`, `super::keys::K`).
    text: String,
}

struct SrcFile {
    /// `src/lock.rs`, relative to the package.
    rel: String,
    /// The top-level module the file belongs to; `None` for `src/lib.rs`.
    module: Option<String>,
    /// How deep the file's own module is below the root (`src/a.rs`: 1).
    depth: usize,
    /// The file's code tokens, without `#[cfg(test)]` items.
    toks: Vec<Tok>,
}

struct Crate {
    files: Vec<SrcFile>,
    /// Top-level module -> a file of it.
    modules: BTreeMap<String, String>,
    refs: Vec<Ref>,
}

fn layer_of(module: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, modules))| modules.contains(&module))
        .map(|(index, (name, _))| (index, *name))
}

fn analyze() -> Crate {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    collect_rs(&root.join("src"), &mut paths);
    paths.sort();
    let mut files = Vec::new();
    let mut test_only_dirs = Vec::new();
    for path in paths {
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let rel = path
            .strip_prefix(root)
            .expect("under the package")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let scanned = scan(&text);
        let (module, depth) = module_of(&rel);
        // `#[cfg(test)] mod name;` makes `name.rs` and `name/` test-only.
        let child_dir = match rel.strip_suffix("/mod.rs") {
            Some(dir) => dir.to_string(),
            None if rel == "src/lib.rs" => "src".to_string(),
            None => rel.trim_end_matches(".rs").to_string(),
        };
        for name in &scanned.test_mods {
            test_only_dirs.push(format!("{child_dir}/{name}"));
        }
        if scanned.test_only || rel == "src/main.rs" || rel.starts_with("src/bin/") {
            continue;
        }
        files.push(SrcFile {
            rel,
            module,
            depth,
            toks: scanned.toks,
        });
    }
    files.retain(|f| {
        !test_only_dirs
            .iter()
            .any(|dir| f.rel == format!("{dir}.rs") || f.rel.starts_with(&format!("{dir}/")))
    });

    let mut modules = BTreeMap::new();
    for file in &files {
        if let Some(module) = &file.module {
            modules
                .entry(module.clone())
                .or_insert_with(|| file.rel.clone());
        }
    }
    let lib = files.iter().find(|f| f.module.is_none());
    if let Some(lib) = lib {
        // Inline or `#[path]` modules declared in lib.rs.
        for pair in lib.toks.windows(3) {
            if pair[0].text == "mod" && is_ident(&pair[1].text) && pair[2].text == "{" {
                modules
                    .entry(pair[1].text.clone())
                    .or_insert_with(|| lib.rel.clone());
            }
        }
    }
    let reexports = lib.map(|lib| root_reexports(&lib.toks, &modules));
    let reexports = reexports.unwrap_or_default();

    let mut refs = Vec::new();
    for file in &files {
        let Some(from) = &file.module else { continue };
        for path in crate_paths(&file.toks, file.depth) {
            let first = &path.segs[0];
            let to = if modules.contains_key(first) {
                first
            } else if let Some(module) = reexports.get(first) {
                module
            } else {
                continue; // a root item that is not a module's re-export
            };
            if to != from {
                refs.push(Ref {
                    file: file.rel.clone(),
                    line: path.line,
                    from: from.clone(),
                    to: to.clone(),
                    text: path.text,
                });
            }
        }
    }
    Crate {
        files,
        modules,
        refs,
    }
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/lib.rs` -> (None, 0); `src/a.rs`, `src/a/mod.rs` -> (a, 1);
/// `src/a/b.rs` -> (a, 2).
fn module_of(rel: &str) -> (Option<String>, usize) {
    let parts: Vec<&str> = rel.split('/').skip(1).collect();
    if parts == ["lib.rs"] {
        return (None, 0);
    }
    let depth = parts.len() - usize::from(parts.last() == Some(&"mod.rs"));
    let module = parts[0].trim_end_matches(".rs").to_string();
    (Some(module), depth)
}

/// Names `use`d in lib.rs from a module (`pub use lock::MultiLock;`), so that
/// `crate::MultiLock` counts as a reference to `lock`.
fn root_reexports(toks: &[Tok], modules: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i].text != "use" {
            i += 1;
            continue;
        }
        let mut paths = Vec::new();
        i = parse_use_tree(toks, i + 1, &mut Vec::new(), &mut paths);
        for path in paths {
            let segs: Vec<&str> = path.segs.iter().map(|(s, _)| s.as_str()).collect();
            let segs = match segs.first() {
                Some(&"crate") | Some(&"self") => &segs[1..],
                _ => &segs[..],
            };
            let (Some(module), Some(last)) = (segs.first(), segs.last()) else {
                continue;
            };
            let name = path.alias.as_deref().unwrap_or(last);
            if segs.len() > 1 && modules.contains_key(*module) && !["*", "self"].contains(&name) {
                names.insert(name.to_string(), module.to_string());
            }
        }
    }
    names
}

/// Strongly connected components (Tarjan), each as a sorted set.
fn strongly_connected<'g>(graph: &BTreeMap<&'g str, BTreeSet<&'g str>>) -> Vec<BTreeSet<&'g str>> {
    struct State<'g> {
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<BTreeSet<&'g str>>,
    }
    fn visit<'g>(v: &'g str, graph: &BTreeMap<&'g str, BTreeSet<&'g str>>, s: &mut State<'g>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(v, graph, &mut state);
        }
    }
    state.out.sort();
    state.out
}

/// For each member of a component, the shortest cycle through it (BFS),
/// without repeats: `[a, b, a]`.
fn shortest_cycles<'g>(
    graph: &BTreeMap<&'g str, BTreeSet<&'g str>>,
    component: &BTreeSet<&'g str>,
) -> Vec<Vec<&'g str>> {
    let mut cycles: Vec<Vec<&str>> = Vec::new();
    let mut seen = BTreeSet::new();
    for &start in component {
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        let mut last = None;
        'bfs: while let Some(v) = queue.pop_front() {
            for &w in &graph[v] {
                if w == start {
                    last = Some(v);
                    break 'bfs;
                }
                if component.contains(w) && !parent.contains_key(w) {
                    parent.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let Some(mut v) = last else { continue };
        let mut cycle = vec![start];
        while v != start {
            cycle.push(v);
            v = parent[v];
        }
        cycle.push(start);
        cycle.reverse();
        // The same cycle, found from another member, is printed once.
        let mut key: Vec<&str> = cycle[1..].to_vec();
        let rotate = key
            .iter()
            .enumerate()
            .min_by_key(|(_, m)| **m)
            .map(|(i, _)| i)
            .unwrap_or(0);
        key.rotate_left(rotate);
        if seen.insert(key) {
            cycles.push(cycle);
        }
    }
    cycles
}

// ---------------------------------------------------------------------------
// The scanner
// ---------------------------------------------------------------------------

/// One token of the code-only view: an identifier or keyword, `::`, or one
/// punctuation character.
#[derive(Debug, Clone, PartialEq)]
struct Tok {
    text: String,
    line: usize,
}

struct Scanned {
    /// Code tokens, without `#[cfg(test)]` items.
    toks: Vec<Tok>,
    /// Modules declared `#[cfg(test)] mod name;` (their files are test-only).
    test_mods: Vec<String>,
    /// The file starts with `#![cfg(test)]`.
    test_only: bool,
}

fn scan(src: &str) -> Scanned {
    let toks = tokenize(&code_only(src));
    let mut kept = Vec::with_capacity(toks.len());
    let mut test_mods = Vec::new();
    let mut test_only = false;
    let mut i = 0;
    while i < toks.len() {
        let inner = text(&toks, i + 1) == "!";
        let open = if inner { i + 2 } else { i + 1 };
        if toks[i].text != "#" || text(&toks, open) != "[" {
            kept.push(toks[i].clone());
            i += 1;
            continue;
        }
        let close = matching(&toks, open, "[", "]");
        if !is_cfg_test(&toks[open + 1..close]) {
            kept.extend_from_slice(&toks[i..=close]);
            i = close + 1;
            continue;
        }
        if inner {
            test_only = true;
            i = close + 1;
            continue;
        }
        let (end, test_mod) = item_end(&toks, close + 1);
        test_mods.extend(test_mod);
        i = end + 1;
    }
    Scanned {
        toks: kept,
        test_mods,
        test_only,
    }
}

/// `cfg(test)`, `cfg(all(test, ..))`, `cfg(any(test, ..))`; not `cfg(not(test))`.
fn is_cfg_test(attr: &[Tok]) -> bool {
    attr.first().is_some_and(|t| t.text == "cfg")
        && attr.iter().any(|t| t.text == "test")
        && !attr.iter().any(|t| t.text == "not")
}

/// The last token of the item starting at `start` (after its attributes),
/// and the module name if it is `mod name;`.
fn item_end(toks: &[Tok], mut start: usize) -> (usize, Option<String>) {
    while text(toks, start) == "#" && text(toks, start + 1) == "[" {
        start = matching(toks, start + 1, "[", "]") + 1;
    }
    let mut depth = 0usize;
    let mut j = start;
    while j < toks.len() {
        match toks[j].text.as_str() {
            "(" | "[" => depth += 1,
            ")" | "]" => depth = depth.saturating_sub(1),
            "{" if depth == 0 => return (matching(toks, j, "{", "}"), None),
            ";" if depth == 0 => {
                let name = (j >= 2 && toks[j - 2].text == "mod").then(|| toks[j - 1].text.clone());
                return (j, name);
            }
            _ => {}
        }
        j += 1;
    }
    (toks.len().saturating_sub(1), None)
}

/// The index of the token closing the bracket opened at `open` (or the last
/// token if it is never closed).
fn matching(toks: &[Tok], open: usize, opening: &str, closing: &str) -> usize {
    let mut depth = 0usize;
    for (j, tok) in toks.iter().enumerate().skip(open) {
        if tok.text == opening {
            depth += 1;
        } else if tok.text == closing {
            depth -= 1;
            if depth == 0 {
                return j;
            }
        }
    }
    toks.len().saturating_sub(1)
}

fn text(toks: &[Tok], i: usize) -> &str {
    toks.get(i).map_or("", |t| t.text.as_str())
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        || s.starts_with("r#")
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The source with comments, string literals and char literals blanked out
/// (every character but newlines becomes a space; the quotes stay), so line
/// numbers are kept and only code is left.
fn code_only(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                let pair = (chars[i], chars.get(i + 1).copied());
                if pair == ('/', Some('*')) {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if pair == ('*', Some('/')) {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r##"..."##: no escapes, ends at a quote followed by as many #.
            out.push('r');
            out.extend(std::iter::repeat_n('#', hashes));
            out.push('"');
            i += hashes + 2;
            while i < chars.len() {
                let closes =
                    chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#'));
                if closes {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += hashes + 1;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    out.push(blank(c));
                    i += 1;
                }
            }
            if i < chars.len() {
                out.push('"');
                i += 1;
            }
        } else if let Some(end) = char_literal_end(&chars, i) {
            out.push('\'');
            out.extend(chars[i + 1..end].iter().map(|&c| blank(c)));
            out.push('\'');
            i = end + 1;
        } else {
            // Code, including a lifetime or label's `'`.
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `r"`, `r#"`, `br"`, `cr#"`...: the number of `#`.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    if chars[i] != 'r' {
        return None;
    }
    let starts_token = |k: usize| k == 0 || !is_ident_char(chars[k - 1]);
    let prefixed = i >= 1 && matches!(chars[i - 1], 'b' | 'c') && starts_token(i - 1);
    if !starts_token(i) && !prefixed {
        return None;
    }
    let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
    (chars.get(i + 1 + hashes) == Some(&'"')).then_some(hashes)
}

/// At a `'`: the index of the closing `'` if this is a char literal (`'x'`,
/// `'{'`, `'\''`, `'\u{1F600}'`), `None` for a lifetime or label (`'a`).
fn char_literal_end(chars: &[char], i: usize) -> Option<usize> {
    if chars[i] != '\'' {
        return None;
    }
    match chars.get(i + 1) {
        Some('\\') => (i + 3..chars.len().min(i + 14)).find(|&k| chars[k] == '\''),
        Some(&c) if c != '\'' && c != '\n' => (chars.get(i + 2) == Some(&'\'')).then_some(i + 2),
        _ => None,
    }
}

fn tokenize(code: &str) -> Vec<Tok> {
    let chars: Vec<char> = code.chars().collect();
    let mut toks = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if is_ident_char(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            // A raw identifier, r#type.
            if chars[start..i] == ['r']
                && chars.get(i) == Some(&'#')
                && chars.get(i + 1).is_some_and(|&c| is_ident_char(c))
            {
                i += 1;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
            }
            toks.push(Tok {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            toks.push(Tok {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            toks.push(Tok {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    toks
}

/// A path in a `use` tree: its segments with their lines, and its `as` name.
#[derive(Debug)]
struct UsePath {
    segs: Vec<(String, usize)>,
    alias: Option<String>,
}

/// Parses the use tree at `i` (after `use`) up to its end, adding each full
/// path to `out`. Returns the index after the tree.
fn parse_use_tree(
    toks: &[Tok],
    mut i: usize,
    prefix: &mut Vec<(String, usize)>,
    out: &mut Vec<UsePath>,
) -> usize {
    loop {
        let tok = text(toks, i);
        if tok == "::" {
            if prefix.is_empty() {
                prefix.push(("::".into(), toks[i].line)); // an extern crate path
            }
            i += 1;
        } else if tok == "{" {
            i += 1;
            while i < toks.len() && text(toks, i) != "}" {
                let before = i;
                i = parse_use_tree(toks, i, &mut prefix.clone(), out);
                if text(toks, i) == "," || i == before {
                    i += 1;
                }
            }
            return i + 1;
        } else if tok == "*" {
            prefix.push(("*".into(), toks[i].line));
            out.push(UsePath {
                segs: prefix.clone(),
                alias: None,
            });
            return i + 1;
        } else if is_ident(tok) {
            prefix.push((tok.to_string(), toks[i].line));
            i += 1;
            if text(toks, i) == "::" {
                continue;
            }
            let mut alias = None;
            if text(toks, i) == "as" {
                alias = Some(text(toks, i + 1).to_string());
                i += 2;
            }
            out.push(UsePath {
                segs: prefix.clone(),
                alias,
            });
            return i;
        } else {
            return i; // `;`, `,`, `}` or something unexpected
        }
    }
}

/// A path that leaves the file's own top-level module through the root:
/// `segs` starts below the root (`crate::lock::X` -> `["lock", "X"]`).
#[derive(Debug, PartialEq)]
struct RootPath {
    line: usize,
    segs: Vec<String>,
    text: String,
}

/// Every root path in the code: in `use` trees and inline (`crate::a::f()`),
/// through `crate::`, or through enough `super::` to reach the root from a
/// module `depth` levels below it (1 for `src/a.rs`). Paths that stay inside
/// the file's top-level module (`super::` in `mod tests`) are left out.
fn crate_paths(toks: &[Tok], depth: usize) -> Vec<RootPath> {
    let mut out = Vec::new();
    // Brace nesting; `true` for the braces of an inline `mod x { .. }`.
    let mut braces: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let tok = toks[i].text.as_str();
        let inline_mods = braces.iter().filter(|&&m| m).count();
        let at = depth + inline_mods;
        if tok == "use" {
            let mut paths = Vec::new();
            i = parse_use_tree(toks, i + 1, &mut Vec::new(), &mut paths);
            out.extend(paths.iter().filter_map(|p| root_path(&p.segs, at)));
            continue;
        }
        if matches!(tok, "crate" | "super" | "self")
            && text(toks, i + 1) == "::"
            && (i == 0 || toks[i - 1].text != "::")
        {
            let mut segs = vec![(tok.to_string(), toks[i].line)];
            let mut j = i + 1;
            while text(toks, j) == "::" && is_ident(text(toks, j + 1)) {
                segs.push((toks[j + 1].text.clone(), toks[j + 1].line));
                j += 2;
            }
            out.extend(root_path(&segs, at));
            i = j;
            continue;
        }
        match tok {
            "{" => braces.push(i >= 2 && toks[i - 2].text == "mod" && is_ident(&toks[i - 1].text)),
            "}" => {
                braces.pop();
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// `segs` as written at `depth` levels below the root, if it goes through the
/// root to an item there.
fn root_path(segs: &[(String, usize)], mut depth: usize) -> Option<RootPath> {
    let mut k = 0;
    match segs.first()?.0.as_str() {
        "crate" => {
            depth = 0;
            k = 1;
        }
        "self" => k = 1,
        "super" => {
            while segs.get(k).is_some_and(|s| s.0 == "super") {
                depth = depth.checked_sub(1)?;
                k += 1;
            }
        }
        _ => return None, // extern crates, or relative to the current module
    }
    let rest = &segs[k..];
    let first = rest.first()?;
    if depth > 0 || matches!(first.0.as_str(), "self" | "*") {
        return None;
    }
    Some(RootPath {
        line: first.1,
        segs: rest.iter().map(|s| s.0.clone()).collect(),
        text: segs
            .iter()
            .map(|s| s.0.as_str())
            .collect::<Vec<_>>()
            .join("::"),
    })
}

/// A function with a body: its name, the line of `fn`, the line of its
/// closing brace.
#[derive(Debug, PartialEq)]
struct FnSpan {
    name: String,
    line: usize,
    end_line: usize,
}

/// Every `fn` with a body (not `fn f();` in traits, not `fn(u8)` types),
/// nested ones too.
fn fn_spans(toks: &[Tok]) -> Vec<FnSpan> {
    let mut spans = Vec::new();
    for (i, tok) in toks.iter().enumerate() {
        if tok.text != "fn" || matches!(text(toks, i + 1), "(" | "") {
            continue;
        }
        let name = match text(toks, i + 1) {
            "$" => format!("${}", text(toks, i + 2)), // in a macro
            name => name.to_string(),
        };
        let mut depth = 0usize;
        for j in i + 1..toks.len() {
            match toks[j].text.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth = depth.saturating_sub(1),
                ";" if depth == 0 => break,
                "{" if depth == 0 => {
                    let close = matching(toks, j, "{", "}");
                    spans.push(FnSpan {
                        name,
                        line: tok.line,
                        end_line: toks[close].line,
                    });
                    break;
                }
                _ => {}
            }
        }
    }
    spans
}

// ---------------------------------------------------------------------------
// The scanner's own tests
// ---------------------------------------------------------------------------

fn paths_of(src: &str, depth: usize) -> Vec<(usize, String)> {
    crate_paths(&scan(src).toks, depth)
        .into_iter()
        .map(|p| (p.line, p.segs.join("::")))
        .collect()
}

#[test]
fn scanner_reads_grouped_use_over_several_lines() {
    let src = "use std::sync::Arc;\n\
               pub(crate) use crate::{\n\
               \x20   clock::Stamp,\n\
               \x20   error::{Error,\n\
               \x20       NodeError as Ne},\n\
               \x20   quorum::{self, *},\n\
               };\n\
               fn f() { let x = crate::keys::make::<u8>(); crate::Stamp::now(); }\n";
    assert_eq!(
        paths_of(src, 1),
        vec![
            (3, "clock::Stamp".to_string()),
            (4, "error::Error".to_string()),
            (4, "error::NodeError".to_string()),
            (6, "quorum::self".to_string()),
            (6, "quorum::*".to_string()),
            (8, "keys::make".to_string()),
            (8, "Stamp::now".to_string()),
        ]
    );
}

#[test]
fn scanner_ignores_comments_and_strings() {
    let src = "//! See [`crate::fence`].\n\
               /// Uses [`crate::lock::MultiLock`] // and crate::wake\n\
               /* crate::watchdog /* nested crate::guard */ crate::lease */\n\
               fn f() -> &'static str {\n\
               \x20   let s = \"crate::x \\\" crate::y\";\n\
               \x20   let r = r#\"crate::raw \"quoted\" \"#;\n\
               \x20   let b = b\"crate::bytes\";\n\
               \x20   crate::keys::make(s) // crate::node\n\
               }\n";
    let code = code_only(src);
    assert_eq!(code.lines().count(), src.lines().count(), "keeps lines");
    for gone in [
        "fence", "lock", "wake", "watchdog", "guard", "lease", "raw", "bytes", "node",
    ] {
        assert!(
            !code.contains(gone),
            "`{gone}` left in the code view:\n{code}"
        );
    }
    assert_eq!(paths_of(src, 1), vec![(8, "keys::make".to_string())]);
}

#[test]
fn scanner_tells_lifetimes_from_char_literals() {
    let src = "fn a<'a>(x: &'a str) -> char {\n\
               \x20   let c = '{';\n\
               \x20   let d = '\\'';\n\
               \x20   'outer: loop { break 'outer; }\n\
               \x20   let e = '\\u{7b}'; let f = b'}';\n\
               \x20   c\n\
               }\n\
               fn b() {}\n";
    let spans = fn_spans(&scan(src).toks);
    let got: Vec<(&str, usize, usize)> = spans
        .iter()
        .map(|s| (s.name.as_str(), s.line, s.end_line))
        .collect();
    assert_eq!(got, vec![("a", 1, 7), ("b", 8, 8)]);
}

#[test]
fn scanner_skips_test_modules_and_follows_super() {
    let src = "use super::keys::K;\n\
               use self::inner::X;\n\
               #[cfg(test)]\n\
               mod tests {\n\
               \x20   use super::*;\n\
               \x20   use crate::lock::MultiLock;\n\
               \x20   fn long() { let b = '{'; }\n\
               }\n\
               #[cfg(test)]\n\
               mod more;\n\
               mod inner { use super::super::node::Node; fn g() { super::helper(); } }\n\
               fn h() { crate::node::f(); }\n";
    let scanned = scan(src);
    assert_eq!(scanned.test_mods, vec!["more".to_string()]);
    assert_eq!(
        paths_of(src, 1),
        vec![
            (1, "keys::K".to_string()),
            (11, "node::Node".to_string()),
            (12, "node::f".to_string())
        ]
    );
    let names: Vec<String> = fn_spans(&scanned.toks)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["g", "h"]);
}

#[test]
fn scanner_measures_only_fns_with_bodies() {
    let src = "trait T {\n\
               \x20   fn f(&self);\n\
               \x20   fn g(&self) -> u8 { 1 }\n\
               }\n\
               fn h(x: [u8; 4], cb: fn(u8) -> u8) -> u8\n\
               where\n\
               \x20   u8: Copy,\n\
               {\n\
               \x20   let s = \"}\";\n\
               \x20   cb(x[0])\n\
               }\n";
    let got: Vec<(String, usize, usize)> = fn_spans(&scan(src).toks)
        .into_iter()
        .map(|s| (s.name, s.line, s.end_line))
        .collect();
    assert_eq!(got, vec![("g".to_string(), 3, 3), ("h".to_string(), 5, 11)]);
}
