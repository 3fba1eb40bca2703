//! Stage `engines`' detection: the shipped rule table on a script's bytes, module sniffing
//! and the static import scan.
#![no_main]

use std::sync::OnceLock;

use kiln_worker::stages::engines::{modules, rules};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    static RULES: OnceLock<rules::EngineRules> = OnceLock::new();
    let rules = RULES.get_or_init(|| rules::EngineRules::load(None).expect("shipped rules"));
    let _ = rules.detect("js/engine.js", data);
    let _ = rules::is_module("js/engine.mjs", data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = modules::imports_of(text);
    }
});
