//! `cargo xtask cycles` (and the first step of `cargo xtask ci`): the modules of each workspace
//! crate must import one another without cycles, so that every crate reads bottom up. A module's
//! imports are its `crate::name` paths outside comments and its test module; a name re-exported
//! by the crate root (`pub use module::{Name}`) counts as its module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The code of a file without comment lines and without its `#[cfg(test)]` module (which
/// closes every file that has one).
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifiers right after each `crate::`, and every identifier of a `crate::{...}` group.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| is_ident(c)) {
            continue; // `elmo_model::crate::`-like text or `mycrate::`
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find(';').unwrap_or(group.len())];
            names.extend(
                inner
                    .split(|c: char| !is_ident(c))
                    .filter(|w| !w.is_empty())
                    .map(str::to_string),
            );
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            names.insert(name);
        }
    }
    names
}

/// Names the crate root re-exports, with the module they come from.
fn re_exports(root: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for statement in root.split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = path.split_once("::") else {
            continue;
        };
        if module.contains(|c: char| !is_ident(c)) {
            continue;
        }
        for name in names
            .split(|c: char| !is_ident(c))
            .filter(|w| !w.is_empty())
        {
            map.insert(name.to_string(), module.to_string());
        }
    }
    map
}

fn module_graph(src: &Path) -> Result<Graph, String> {
    let read =
        |path: &Path| std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()));
    let root = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| format!("{}: no lib.rs or main.rs", src.display()))?;
    let exported = re_exports(&code_of(&read(&root)?));
    let entries = std::fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut files = BTreeMap::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let is_module = path.extension().is_some_and(|e| e == "rs") && path != root;
        if let (true, Some(stem)) = (is_module, path.file_stem().and_then(|s| s.to_str())) {
            files.insert(stem.to_string(), code_of(&read(&path)?));
        }
    }
    let mut graph = Graph::new();
    for (module, code) in &files {
        let imports = crate_paths(code)
            .into_iter()
            .filter_map(|name| match files.contains_key(&name) {
                true => Some(name),
                false => exported.get(&name).cloned(),
            })
            .filter(|name| name != module && files.contains_key(name))
            .collect();
        graph.insert(module.clone(), imports);
    }
    Ok(graph)
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Checks every `crates/*/src` and `examples/*/src` of the workspace at `root`.
pub fn check(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    let mut n_crates = 0;
    for parent in ["crates", "examples"] {
        let Ok(entries) = std::fs::read_dir(root.join(parent)) else {
            continue;
        };
        let mut dirs: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        dirs.sort();
        for dir in dirs {
            let src = dir.join("src");
            if !src.is_dir() {
                continue;
            }
            n_crates += 1;
            let graph = module_graph(&src)?;
            for component in cycles(&graph) {
                let edges: Vec<String> = component
                    .iter()
                    .map(|m| {
                        let inside: Vec<&str> = graph[m]
                            .iter()
                            .filter(|t| component.contains(t))
                            .map(String::as_str)
                            .collect();
                        format!("{m} → {}", inside.join(", "))
                    })
                    .collect();
                problems.push(format!(
                    "{}: import cycle among {} modules: {}",
                    src.display(),
                    component.len(),
                    edges.join("; ")
                ));
            }
        }
    }
    if n_crates == 0 {
        // A check that read nothing must not pass (an xtask binary built in another checkout
        // that shares the target directory looks for the crates there).
        return Err(format!(
            "module imports: no crate sources under {} (xtask built elsewhere? touch xtask/src/main.rs)",
            root.display()
        ));
    }
    if problems.is_empty() {
        println!("module imports: no cycles in {n_crates} crates");
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> Graph {
        edges
            .iter()
            .map(|(m, to)| (m.to_string(), to.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_root_without_crates_is_an_error() {
        let empty = std::env::temp_dir().join(format!("xtask-no-crates-{}", std::process::id()));
        std::fs::create_dir_all(&empty).expect("temp dir");
        let result = check(&empty);
        std::fs::remove_dir_all(&empty).ok();
        assert!(result.is_err_and(|e| e.contains("no crate sources")));
    }

    #[test]
    fn a_cycle_is_found_and_a_chain_is_not() {
        let chain = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &[])]);
        assert!(cycles(&chain).is_empty());
        let cycle = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
        assert_eq!(cycles(&cycle), vec![vec!["a", "b", "c"]]);
    }

    #[test]
    fn paths_groups_and_re_exports_are_imports_but_comments_and_tests_are_not() {
        let code = code_of(
            "use crate::batch::Batch;\nuse crate::{error::Result, Tagger};\n\
             // see crate::model\nfn f() { crate::index::id(); }\n#[cfg(test)]\nuse crate::task;",
        );
        let paths = crate_paths(&code);
        for name in ["batch", "error", "Result", "Tagger", "index"] {
            assert!(paths.contains(name), "{name} in {paths:?}");
        }
        assert!(!paths.contains("model") && !paths.contains("task"));
        let exported = re_exports("pub use tagger::{Tagger, TaggerConfig};\npub use crf::Crf;");
        assert_eq!(exported["Tagger"], "tagger");
        assert_eq!(exported["Crf"], "crf");
    }
}
