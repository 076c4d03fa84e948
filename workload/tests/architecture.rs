//! The folders of `workload/src` import one another without a cycle, so each can be read
//! (and changed) knowing only those below it (docs/architecture.md). Reads the sources:
//! every `crate::<module>` a file names, tests excluded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: its folder, or its own name at the root.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().to_string();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::x` named outside the file's test module.
fn imports(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let name: String = code[i + 7..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = module_of(&src, f);
        if from == "main" || from == "lib" {
            continue;
        }
        let to = imports(&std::fs::read_to_string(f).unwrap());
        g.entry(from.clone()).or_default().extend(to.into_iter().filter(|m| *m != from));
    }
    g
}

/// A path of imports from `from` back to itself, if any.
fn cycle_through(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    fn walk(g: &BTreeMap<String, BTreeSet<String>>, at: &str, goal: &str, path: &mut Vec<String>, seen: &mut BTreeSet<String>) -> bool {
        for next in g.get(at).into_iter().flatten() {
            if next == goal {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(g, next, goal, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![from.to_string()];
    walk(g, from, from, &mut path, &mut BTreeSet::new()).then_some(path)
}

#[test]
fn the_folders_import_one_another_without_a_cycle() {
    let g = graph();
    assert!(g.len() >= 10, "read too few modules: {g:?}");
    for m in g.keys() {
        if let Some(cycle) = cycle_through(&g, m) {
            panic!("an import cycle between folders: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), BTreeSet::from([v.to_string()])))
        .collect();
    assert_eq!(cycle_through(&g, "a"), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    let mut acyclic = g.clone();
    acyclic.get_mut("c").unwrap().clear();
    assert_eq!(cycle_through(&acyclic, "a"), None);
}
