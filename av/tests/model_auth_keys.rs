//! Auth keys against a plain reference model of fi_av(3) (and the rules of `uet_av::av::auth_keys`
//! where the man page leaves them to the provider): random sequences of `fi_av_insert_auth_key`,
//! inserts and symmetric inserts with and without `FI_AUTH_KEY` (held keys, stale handles,
//! values that are no handle, malformed addresses, a full table), removes of addresses and of keys, `fi_av_lookup_auth_key`
//! of keys and of addresses, `fi_av_set_user_id` of addresses and of keys (`FI_AUTH_KEY`) on
//! AVs with and without `FI_AV_USER_ID`, and NIC refusals of the auth-key commands. After every
//! step the model, the host mirror, the NIC AV table and the NIC auth-key table (JobIDs and
//! sources) agree.

mod common;
#[path = "model_auth_keys/engine.rs"]
mod engine;

use engine::*;
use uet_av::FiErrno;

#[test]
fn auth_keys_match_the_model() {
    let mut seen = Tally::new();
    // 6 runs of 10,000 steps: tables nearly always full, often full, and rarely full.
    for (seed, cap) in [
        (0x9e37_79b9_7f4a_7c15u64, 4usize),
        (0xdead_beef_cafe_f00d, 8),
        (0x0123_4567_89ab_cdef, 16),
        (0x5151_5151_5151_5151, 6),
        (0x0bad_5eed_0f00_d001, 12),
        (0x7e57_9a0f_0123_4567, 32),
    ] {
        run(seed, attr(cap), 10_000, &mut seen);
    }
    // 3 more on AVs opened with FI_AV_USER_ID: user ids of addresses and of keys (the
    // source each key's NIC slot reports).
    for (seed, cap) in [
        (0x2545_f491_4f6c_dd1du64, 4usize),
        (0x1b87_3593_5851_3e29, 8),
        (0x6a09_e667_f3bc_c908, 16),
    ] {
        run(seed, attr_with_user_ids(cap), 10_000, &mut seen);
    }
    // Every outcome the calls can have came up.
    for e in [
        FiErrno::FI_EINVAL,
        FiErrno::FI_ENOSPC,
        FiErrno::FI_EBUSY,
        FiErrno::FI_ENOKEY,
        FiErrno::FI_EIO,
    ] {
        assert!(
            seen.get(&e.to_status()).is_some_and(|&n| n > 0),
            "{e:?}: {seen:?}"
        );
    }
    assert!(seen.get(&0).is_some_and(|&n| n > 1000), "{seen:?}");
}
