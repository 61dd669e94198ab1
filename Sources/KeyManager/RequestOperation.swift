/// What one request asks keymgr to do, as the agent's policy names it: a closed set with stable ids (polkit's
/// actions), `key.sign`, `key.bind`, `admin.revoke`, … (docs/agent-policy.md lists them).
///
/// A policy's `may` names ids; the command path of each (`sign`, `pin change`, `admin revoke`, as typed after
/// `keymgr`) is an alias that means the same operation, so policies written before the ids keep loading and meaning
/// what they meant. The CLI maps each command to one operation (`AgentGate`); a command of the CLI without one fails
/// the CLI's tests, so no command escapes the policy.
package enum RequestOperation: String, Sendable, CaseIterable, Hashable {
    case storeInit = "store.init"
    case deviceStatus = "device.status"
    case deviceDoctor = "device.doctor"
    case userList = "user.list"
    case keyList = "key.list"
    case keyBind = "key.bind"
    case keySign = "key.sign"
    case keyRebind = "key.rebind"
    case keyRevoke = "key.revoke"
    case keyExport = "key.export"
    case pinChange = "pin.change"
    case auditList = "audit.list"
    case auditVerify = "audit.verify"
    case auditArchive = "audit.archive"
    case auditClearTampering = "audit.clear-tampering"
    case serverSet = "server.set"
    case serverShow = "server.show"
    case serverList = "server.list"
    case serverRemove = "server.remove"
    case sync = "sync.run"
    case adminDevices = "admin.devices"
    case adminStale = "admin.stale"
    case adminRevoke = "admin.revoke"
    case masterRotate = "master.rotate"
    case dcrRegister = "dcr.register"
    case dcrShow = "dcr.show"
    case dcrDelete = "dcr.delete"
    case dcrForget = "dcr.forget"
    case tokenImport = "token.import"
    case tokenShow = "token.show"
    case tokenRefresh = "token.refresh"
    case tokenRevoke = "token.revoke"
    case tokenPrint = "token.print"
    case tokenLogin = "token.login"
    case dpopProof = "dpop.proof"
    case configShow = "config.show"
    case configSet = "config.set"
    case tpmStatus = "tpm.status"
    case tpmResetLockout = "tpm.reset-lockout"
    case tpmRecover = "tpm.recover"
    case personLink = "person.link"
    case personUnlink = "person.unlink"
    case personList = "person.list"
    case agentRun = "agent.run"

    /// The stable id a policy names: `key.sign`.
    package var id: String { rawValue }

    /// The command path that is an alias of this operation, as typed after `keymgr`: `sign`, `pin change`.
    package var commandPath: String {
        switch self {
        case .storeInit: "init"
        case .deviceStatus: "status"
        case .deviceDoctor: "doctor"
        case .userList: "users"
        case .keyList: "list"
        case .keyBind: "bind"
        case .keySign: "sign"
        case .keyRebind: "rebind"
        case .keyRevoke: "revoke"
        case .keyExport: "export"
        case .pinChange: "pin change"
        case .auditList: "audit"
        case .auditVerify: "audit verify"
        case .auditArchive: "audit archive"
        case .auditClearTampering: "audit clear-tampering"
        case .serverSet: "server set"
        case .serverShow: "server show"
        case .serverList: "server list"
        case .serverRemove: "server remove"
        case .sync: "sync"
        case .adminDevices: "admin devices"
        case .adminStale: "admin stale"
        case .adminRevoke: "admin revoke"
        case .masterRotate: "master rotate"
        case .dcrRegister: "dcr register"
        case .dcrShow: "dcr show"
        case .dcrDelete: "dcr delete"
        case .dcrForget: "dcr forget"
        case .tokenImport: "token import"
        case .tokenShow: "token show"
        case .tokenRefresh: "token refresh"
        case .tokenRevoke: "token revoke"
        case .tokenPrint: "token print"
        case .tokenLogin: "login"
        case .dpopProof: "dpop proof"
        case .configShow: "config show"
        case .configSet: "config set"
        case .tpmStatus: "tpm status"
        case .tpmResetLockout: "tpm reset-lockout"
        case .tpmRecover: "tpm recover"
        case .personLink: "person link"
        case .personUnlink: "person unlink"
        case .personList: "person list"
        case .agentRun: "agent"
        }
    }

    /// The operation a policy's `may` entry names: its id or its command path (an alias); nil for anything else.
    package init?(named name: String) {
        if let operation = RequestOperation(rawValue: name) {
            self = operation
        } else if let operation = Self.byCommandPath[name] {
            self = operation
        } else {
            return nil
        }
    }

    /// The operation a command path names (`pin change`), or nil.
    package init?(commandPath: String) {
        guard let operation = Self.byCommandPath[commandPath] else { return nil }
        self = operation
    }

    private static let byCommandPath: [String: RequestOperation] =
        Dictionary(uniqueKeysWithValues: allCases.map { ($0.commandPath, $0) })

    /// Whether a bind under a `for = "self"` rule may create (and so link to the caller) an identity user nobody has.
    package var createsIdentity: Bool { self == .keyBind }
}
