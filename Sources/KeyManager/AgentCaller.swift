import Synchronization

/// The person a request through the agent comes from, as the kernel reports the peer of the agent's socket
/// (`SO_PEERCRED`, `SO_PEERGROUPS`): nothing the client says about itself.
public struct AgentCaller: Sendable, Equatable {
    /// The caller's user id.
    public var uid: UInt32
    /// The caller's primary group id.
    public var gid: UInt32
    /// The caller's process id.
    public var pid: Int32
    /// The caller's supplementary group ids.
    public var groups: [UInt32]
    /// The caller's login name (`getpwuid`), or `uid:N` when the uid has none.
    public var login: String

    public init(uid: UInt32, gid: UInt32, pid: Int32, groups: [UInt32], login: String) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.groups = groups
        self.login = login
    }

    private static let storage = Mutex<AgentCaller?>(nil)

    /// The caller a worker of the agent serves; nil when keymgr runs directly (embedded mode).
    public static var current: AgentCaller? {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}
