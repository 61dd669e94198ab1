import Foundation

/// The person a `keymgr agent` worker acts for, as the kernel reported them on the socket (`SO_PEERCRED`,
/// `SO_PEERGROUPS`): nothing the client says about itself goes in here.
///
/// The worker puts it in the request's `RequestContext`, which `KeyManager.open` takes. With a caller, the audit
/// actor is `"<login> (uid <uid>)"` and a verifier's `{osUser}` is `<login>`; without one (the CLI run directly,
/// "embedded"), both are the OS user running keymgr.
package struct AgentCaller: Sendable, Equatable {
    package let uid: UInt32
    package let gid: UInt32
    package let pid: Int32
    /// Supplementary groups (the primary group is `gid`).
    package let groups: [UInt32]
    /// The login name of `uid` from the user database, or `uid:N` when it has none.
    package let login: String

    package init(uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32], login: String) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.groups = groups
        self.login = login
    }

    /// The caller with `uid`'s login name looked up in the user database.
    package init(uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32]) {
        self.init(uid: uid, gid: gid, pid: pid, groups: groups, login: Self.loginName(uid: uid))
    }

    /// What the audit log records as the actor.
    package var auditActor: String { "\(login) (uid \(uid))" }

    /// `uid`'s login name, or `uid:N`.
    package static func loginName(uid: UInt32) -> String {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else {
            return "uid:\(uid)"
        }
        return String(cString: name)
    }
}
