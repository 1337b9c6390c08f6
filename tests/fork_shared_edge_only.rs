//! A fork child's copy of a `SharedFdView` refuses `set_edge_only` and changes nothing:
//! the registration is the parent's.
//!
//! One test per file: the child of a fork runs only the refusal (its error, an atomic look
//! at the region, the view's own lock, which no other thread holds) and `_exit`.

mod shared_util;

use std::io::ErrorKind;

use evfd::{Mode, SharedNotifier};
use shared_util::{fork_child, wait_child};

/// A fork child's copy of a view refuses the switch with `Unsupported` and changes
/// nothing; the parent's view is untouched.
#[test]
fn fork_child_cannot_switch() {
    let s = SharedNotifier::new(Mode::Counter).unwrap();
    let view = s.fd_view().unwrap();
    let pid = fork_child(|| {
        let refused = matches!(
            view.set_edge_only(true),
            Err(e) if e.kind() == ErrorKind::Unsupported
        );
        let unchanged = !view.is_edge_only() && s.sleepers().2 == 1 && s.edge_consumers() == 0;
        i32::from(!(refused && unchanged))
    });
    assert_eq!(
        wait_child(pid),
        0,
        "the child's copy changed or was not refused"
    );
    assert!(!view.is_edge_only());
    assert_eq!((s.sleepers().2, s.edge_consumers()), (1, 0));
    view.set_edge_only(true).unwrap();
    assert_eq!((s.sleepers().2, s.edge_consumers()), (0, 1));
}
