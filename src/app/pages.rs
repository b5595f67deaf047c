//! Loading a million rules touches about a gigabyte once. Zeroing it as
//! transparent huge pages cost 3 s of a 12 s `sluice check` on a 2-core
//! host (against under half a second as small pages), so a first load runs
//! with them off and the process's setting is put back after: what serves
//! requests later keeps huge pages where the host gives them.

/// Runs `load` with transparent huge pages off for this process, then
/// restores the setting it found. Where the kernel cannot say (not Linux,
/// an old kernel) `load` simply runs.
pub(crate) fn small_pages<T>(load: impl FnOnce() -> T) -> T {
    let was = rustix::thread::transparent_huge_pages_are_disabled();
    let switched =
        matches!(was, Ok(false)) && rustix::thread::disable_transparent_huge_pages(true).is_ok();
    let out = load();
    if switched {
        let _ = rustix::thread::disable_transparent_huge_pages(false);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_found_is_put_back() {
        let before = rustix::thread::transparent_huge_pages_are_disabled();
        let inside = small_pages(rustix::thread::transparent_huge_pages_are_disabled);
        assert_eq!(
            rustix::thread::transparent_huge_pages_are_disabled().ok(),
            before.as_ref().ok().copied()
        );
        if before.is_ok() {
            assert_eq!(inside.ok(), Some(true), "off while loading");
        }
    }
}
