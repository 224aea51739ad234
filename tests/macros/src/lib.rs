//! `#[kernel_test]` marks a test that needs root and the real kernel.
//!
//! libtest can only mark a test ignored at compile time, so the opt-out is a build-time
//! cfg (set by the test crate's build script from `LIMITER_SKIP_KERNEL_TESTS`): an
//! opted-out run lists every kernel test as ignored, with the reason, never as passed.
//! A test that does run first checks for root and fails saying how to fix it.

use proc_macro::{Delimiter, Group, TokenStream, TokenTree};

#[proc_macro_attribute]
pub fn kernel_test(attr: TokenStream, item: TokenStream) -> TokenStream {
    assert!(attr.is_empty(), "#[kernel_test] takes no arguments");
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let body = match tokens.pop() {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => g,
        _ => panic!("#[kernel_test] goes on a function with a body"),
    };
    let check: TokenStream = "::limiter_integration_tests::require_root();"
        .parse()
        .expect("a valid statement");
    let mut checked = Group::new(
        Delimiter::Brace,
        check.into_iter().chain(body.stream()).collect(),
    );
    checked.set_span(body.span());
    let attributes: TokenStream = concat!(
        "#[test] #[cfg_attr(limiter_kernel_tests_skipped, ",
        "ignore = \"kernel test: LIMITER_SKIP_KERNEL_TESTS=1 at build time\")]"
    )
    .parse()
    .expect("valid attributes");
    attributes
        .into_iter()
        .chain(tokens)
        .chain([TokenTree::Group(checked)])
        .collect()
}
