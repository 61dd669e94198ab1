import Foundation

/// The OS account the agent runs as: `keymgr`, created by sysusers.d/keymgr.conf and named by keymgr.service's
/// `User=`. Its store (/var/lib/keymgr, the unit's `StateDirectory=`) is that account's, so root, checking or
/// maintaining it directly (`sudo keymgr --home /var/lib/keymgr doctor`), must accept it as the store's owner.
///
/// The account is read from the system's user database (getpwnam), which only root can change: a non-root user
/// cannot make their own uid pass for it. The owner of the store's directory could not serve (whoever owns a store
/// would vouch for themselves), nor could an environment variable (a caller's own choice). Only root is given this
/// latitude; anyone else still needs a store of their own.
package enum AgentAccount {
    /// The account's login name.
    package static let name = "keymgr"

    /// The account's uid, nil when this system has no such account.
    package static let uid: uid_t? = {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }()

    /// Whether this process may trust a store file or directory owned by `owner`: its own, root's, or, for root, the
    /// agent's account's.
    package static func mayOwnStore(_ owner: uid_t) -> Bool {
        owner == geteuid() || owner == 0 || (geteuid() == 0 && owner == uid)
    }
}
