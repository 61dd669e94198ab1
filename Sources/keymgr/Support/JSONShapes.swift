import Foundation
import KeyManager
import Sync

// The JSON objects of the CLI contract, one `Encodable` type each, so every command prints the same shapes.
// `Console.answer(json:)` encodes them with sorted keys; absent values are `null` (`@Nullable`), never
// missing; timestamps are ISO 8601 UTC (`ISOTime`).

/// An optional member that is encoded as `null` when absent, instead of being left out.
@propertyWrapper
struct Nullable<Value: Encodable>: Encodable {
    var wrappedValue: Value?

    init(wrappedValue: Value?) {
        self.wrappedValue = wrappedValue
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}

/// `{"kid","userId","username","authType","status","serverState","createdAt","lastUsedAt","deviceName"}`,
/// plus `"jwk"` and `"jws"` for bind and rebind.
struct KeyJSON: Encodable {
    let kid: String
    let userId: String
    @Nullable var username: String?
    let authType: String
    let status: String
    let serverState: String
    let createdAt: Date
    @Nullable var lastUsedAt: Date?
    @Nullable var deviceName: String?
    /// The login of the person who owns the key's identity user (a person link), or null.
    @Nullable var owner: String?
    /// An active or locked APPLICATION_PIN key as `list` shows it: wrong PINs left before it locks (absent otherwise).
    let pinAttemptsLeft: Int?
    /// Bind and rebind only: the public JWK (absent members left out, as RFC 7517 expects).
    let jwk: JSONValue?
    /// Bind and rebind with a challenge only.
    let jws: String?

    init(_ key: UserKey, jwk: JWK? = nil, jws: String? = nil) {
        kid = key.kid
        userId = key.userId
        username = key.username
        authType = key.authType.rawValue
        status = key.status.rawValue
        serverState = key.serverState.rawValue
        createdAt = key.createdAt
        lastUsedAt = key.lastUsedAt
        deviceName = key.deviceName
        owner = key.owner
        pinAttemptsLeft = key.pinAttemptsLeft
        self.jwk = jwk.map { $0.jsonObject() }
        self.jws = jws
    }

    init(_ result: BindResult) {
        self.init(result.key, jwk: result.jwk, jws: result.jws)
    }
}

/// `{"kid","jws"}` (sign).
struct SignatureJSON: Encodable {
    let kid: String
    let jws: String

    init(_ result: SignResult) {
        kid = result.kid
        jws = result.jws
    }
}

/// `{"deviceId","deviceName","schemaVersion","users","keys","lastSync"}` (status and init).
struct StatusJSON: Encodable {
    let deviceId: String
    let deviceName: String
    let schemaVersion: Int
    let users: Int
    let keys: Int
    @Nullable var lastSync: Date?
    let keyBackend: String
    @Nullable var keyBackendReason: String?
    @Nullable var tpmTcti: String?
    let masterKey: MasterKeyJSON
    /// The agent serving this request: its socket and policy; null when the command opened the store itself.
    @Nullable var agent: AgentJSON?
    /// Keys by status: `{"active","locked","revoked","superseded"}`.
    let keysByState: [String: Int]
    /// Active and locked APPLICATION_PIN keys: `{"kid","userId","status","attemptsLeft"}`.
    let pinKeys: [PINKeyJSON]
    /// The identity server profiles: `{"name","dialect","baseUrl"}`.
    let servers: [ServerJSON]
    /// The last sync run: when, and what it found; null when none ran.
    @Nullable var lastSyncRun: SyncRunJSON?
    /// Accounts whose wrong PINs for other people's keys are counted or held back: `{"uid","login","failures",
    /// "blockedUntil"}` (through the agent: the caller's own only).
    let pinThrottle: [PINThrottleJSON]

    struct AgentJSON: Encodable {
        let socket: String
        let policy: String
        /// Whether the policy file, as it is now, loads: a restart would serve with it.
        let policyChecks: Bool
        /// What is wrong with it (`file:line: …`), when it does not.
        @Nullable var policyProblem: String?
    }

    struct PINKeyJSON: Encodable {
        let kid: String
        let userId: String
        let status: String
        let attemptsLeft: Int
    }

    struct ServerJSON: Encodable {
        let name: String
        let dialect: String
        let baseUrl: String
    }

    struct SyncRunJSON: Encodable {
        let server: String
        let startedAt: Date
        @Nullable var finishedAt: Date?
        /// `ok` (every user reconciled), `partial` (some could not be: `errors`), `unfinished` (no end recorded).
        let result: String
        let users: Int
        let inSync: Int
        let registered: Int
        let revoked: Int
        let serverDeleted: Int
        let orphans: Int
        let errors: Int
    }

    struct PINThrottleJSON: Encodable {
        let uid: Int64
        let login: String
        let failures: Int
        @Nullable var blockedUntil: Date?
    }

    /// Server profiles whose clock is more than 60 s from this device's: `[{"server","seconds"}]`, seconds the
    /// server is ahead (negative: behind).
    let serverClockSkew: [ClockSkewJSON]
    /// A TPM store whose TPM was cleared or replaced: `{"tcti", "why", "unusableKeys": [{"kid", "userId"}]}`; null
    /// otherwise.
    @Nullable var tpmReplaced: TPMReplacedJSON?

    struct TPMReplacedJSON: Encodable {
        struct Key: Encodable {
            let kid: String
            let userId: String
        }
        let tcti: String
        let why: String
        let unusableKeys: [Key]
    }

    struct ClockSkewJSON: Encodable {
        let server: String
        let seconds: Int64
    }

    /// Where the master key came from: `{"source","path","tcti"}` (`tcti` null unless sealed to a TPM).
    struct MasterKeyJSON: Encodable {
        let source: String
        @Nullable var path: String?
        @Nullable var tcti: String?
    }

    init(_ status: StoreStatus, agent: AgentJSON? = nil) {
        self.agent = agent
        keysByState = Dictionary(uniqueKeysWithValues: KeyStatus.allCases.map { ($0.rawValue, status.keysByState[$0] ?? 0) })
        pinKeys = status.pinKeys.map { PINKeyJSON(kid: $0.kid, userId: $0.userId, status: $0.status.rawValue, attemptsLeft: $0.attemptsLeft) }
        servers = status.servers.map { ServerJSON(name: $0.name, dialect: $0.dialect, baseUrl: $0.baseURL) }
        lastSyncRun = status.lastSyncRun.map {
            SyncRunJSON(server: $0.server, startedAt: $0.startedAt, finishedAt: $0.finishedAt, result: Self.result(of: $0),
                        users: $0.users, inSync: $0.inSync, registered: $0.registered, revoked: $0.revoked,
                        serverDeleted: $0.serverDeleted, orphans: $0.orphans, errors: $0.errors)
        }
        pinThrottle = status.pinThrottles.map {
            PINThrottleJSON(uid: $0.uid, login: $0.login, failures: $0.failures, blockedUntil: $0.blockedUntil)
        }
        deviceId = status.deviceId
        deviceName = status.deviceName
        schemaVersion = status.schemaVersion
        users = status.users
        keys = status.keys
        lastSync = status.lastSync
        keyBackend = status.keyBackend.rawValue
        keyBackendReason = status.keyBackendReason
        tpmTcti = status.tpmTcti
        masterKey = MasterKeyJSON(source: status.masterKeySource, path: status.masterKeyLocation,
                                  tcti: status.masterKeyTCTI)
        serverClockSkew = status.serverClockSkews.map { ClockSkewJSON(server: $0.serverName, seconds: $0.seconds) }
        tpmReplaced = status.tpmReplaced.map {
            TPMReplacedJSON(tcti: $0.tcti, why: $0.why,
                            unusableKeys: $0.unusableKeys.map { TPMReplacedJSON.Key(kid: $0.kid, userId: $0.userId) })
        }
    }

    /// `ok`, `partial` or `unfinished`.
    static func result(of run: SyncRun) -> String {
        run.finishedAt == nil ? "unfinished" : run.errors > 0 ? "partial" : "ok"
    }
}

/// `{"userId","username","keys","createdAt"}`; `keys` counts the user's active keys.
struct UserJSON: Encodable {
    let userId: String
    @Nullable var username: String?
    let keys: Int
    let createdAt: Date
    /// The login of the person linked to this identity user, or null.
    @Nullable var owner: String?

    init(_ user: UserSummary) {
        userId = user.userId
        username = user.username
        keys = user.activeKeys
        createdAt = user.createdAt
        owner = user.owner
    }
}

/// `{"seq","at","event","userId","kid","actor","details","hash","prevHash"}`.
struct AuditEntryJSON: Encodable {
    let seq: Int64
    let at: String
    let event: String
    @Nullable var userId: String?
    @Nullable var kid: String?
    /// The login of the person linked to the entry's identity user (now), or null.
    @Nullable var owner: String?
    let actor: String
    let details: JSONValue
    let hash: String
    let prevHash: String

    init(_ entry: AuditEntry) {
        seq = entry.seq
        at = entry.at
        event = entry.event
        userId = entry.userId
        kid = entry.kid
        owner = entry.owner
        actor = entry.actor
        details = entry.details
        hash = entry.hash
        prevHash = entry.prevHash
    }
}

/// `{"intact","checked","firstBadSeq","reason"}`; the last two are `null` when the chain holds.
struct AuditVerificationJSON: Encodable {
    let intact: Bool
    let checked: Int
    @Nullable var firstBadSeq: Int64?
    @Nullable var reason: String?
    let rowsChecked: Int
    let rowIssues: [RowIssueJSON]

    /// `{"table", "row", "reason"}`: `row` is null for a problem with the table's set of rows.
    struct RowIssueJSON: Encodable {
        let table: String
        @Nullable var row: String?
        let reason: String
    }

    init(_ report: AuditVerification) {
        intact = report.isIntact
        checked = report.checked
        firstBadSeq = report.firstBad?.seq
        reason = report.firstBad?.reason
        rowsChecked = report.rowsChecked
        rowIssues = report.rowIssues.map { RowIssueJSON(table: $0.table, row: $0.row, reason: $0.reason) }
    }
}

/// `{"name","dialect","baseUrl","realmPath","credentialFile","credentialHeader","tokenEndpoint",
/// "registrationEndpoint","revocationEndpoint","deviceAuthorizationEndpoint","tokenBinding","updatedAt"}`:
/// where the credential is read from, never the credential.
struct ServerSettingsJSON: Encodable {
    let name: String
    let dialect: String
    let baseUrl: String
    let realmPath: String
    @Nullable var credentialFile: String?
    let credentialHeader: String
    @Nullable var tokenEndpoint: String?
    @Nullable var registrationEndpoint: String?
    @Nullable var revocationEndpoint: String?
    @Nullable var deviceAuthorizationEndpoint: String?
    let tokenBinding: String
    let updatedAt: Date

    init(_ settings: ServerSettings) {
        name = settings.name
        dialect = settings.dialect.rawValue
        baseUrl = settings.baseURL.absoluteString
        realmPath = settings.realmPath
        credentialFile = settings.credentialFile
        credentialHeader = settings.credentialHeader
        tokenEndpoint = settings.tokenEndpoint?.absoluteString
        registrationEndpoint = settings.registrationEndpoint?.absoluteString
        revocationEndpoint = settings.revocationEndpoint?.absoluteString
        deviceAuthorizationEndpoint = settings.deviceAuthorizationEndpoint?.absoluteString
        tokenBinding = settings.tokenBinding.rawValue
        updatedAt = settings.updatedAt
    }
}

/// `{"dryRun","applied","users","inSync","registered","revoked","serverDeleted","orphans",
/// "errors":[{"userId","code","message"}],"writes"}`; the four lists hold kids.
struct SyncReportJSON: Encodable {
    struct UserErrorJSON: Encodable {
        let userId: String
        let code: String
        let message: String
    }

    let dryRun: Bool
    /// False when nothing was written: a dry run, or a run the safety valve held back.
    let applied: Bool
    let users: Int
    let inSync: Int
    let registered: [String]
    let revoked: [String]
    let serverDeleted: [String]
    let orphans: [String]
    let errors: [UserErrorJSON]
    let writes: Int
    /// The writes by what they record.
    let writesByKind: SyncWritesJSON
    /// Usable keys of this device the server does not hold (bound here without a journey).
    let unregistered: [String]
    /// Users whose client registration the server no longer knows (rule 5), wiped here.
    let registrationsWiped: [String]
    /// Users whose registration access token the server refused in an earlier run (400 `access_denied` or 403):
    /// not asked again; `keymgr dcr forget` removes them here.
    let registrationsRefused: [String]

    init(_ report: SyncReport) {
        dryRun = report.dryRun
        applied = !report.dryRun && !report.safetyValveTripped
        users = report.users
        inSync = report.inSync
        registered = report.registered
        revoked = report.revoked
        serverDeleted = report.serverDeleted
        orphans = report.orphans
        errors = report.errors.map { UserErrorJSON(userId: $0.userId, code: $0.code.rawValue, message: $0.message) }
        writes = report.writes
        writesByKind = SyncWritesJSON(report.writesByKind)
        unregistered = report.unregistered
        registrationsWiped = report.registrationsWiped
        registrationsRefused = report.registrationsRefused
    }
}

/// `writesByKind` of `sync --json`.
struct SyncWritesJSON: Encodable {
    let registered, mirrored, revoked, serverDeleted, orphansPruned, credentialsWiped, registrationsWiped: Int

    init(_ writes: SyncWrites) {
        registered = writes.registered
        mirrored = writes.mirrored
        revoked = writes.revoked
        serverDeleted = writes.serverDeleted
        orphansPruned = writes.orphansPruned
        credentialsWiped = writes.credentialsWiped
        registrationsWiped = writes.registrationsWiped
    }
}

/// `{"secretsRewrapped"}` (master rotate).
struct RotationJSON: Encodable {
    let secretsRewrapped: Int
}

/// `{"userId","uuid","kid","deviceId","deviceName","createdAt","lastAccessAt","thisDevice"}` (admin devices, admin stale).
struct FleetBindingJSON: Encodable {
    let userId: String
    let uuid: String
    let kid: String
    @Nullable var deviceId: String?
    @Nullable var deviceName: String?
    @Nullable var createdAt: Date?
    @Nullable var lastAccessAt: Date?
    let thisDevice: Bool

    init(_ binding: FleetBinding) {
        userId = binding.userId
        uuid = binding.uuid
        kid = binding.kid
        deviceId = binding.deviceId
        deviceName = binding.deviceName
        createdAt = binding.createdAt
        lastAccessAt = binding.lastAccessAt
        thisDevice = binding.thisDevice
    }
}

/// `{"userId","deviceId","thisDevice","deletedOnServer","alreadyGone","clientDeleted","revokedHere","tokenSetsWiped",
/// "registrationsWiped","changed"}` (admin revoke).
struct DeviceRevocationJSON: Encodable {
    let userId: String
    @Nullable var deviceId: String?
    let thisDevice: Bool
    let deletedOnServer: [String]
    let alreadyGone: [String]
    let clientDeleted: Bool
    let revokedHere: [String]
    let tokenSetsWiped: Int
    let registrationsWiped: Int
    let changed: Bool

    init(_ report: DeviceRevocationReport) {
        userId = report.plan.userId
        deviceId = report.plan.deviceId
        thisDevice = report.plan.thisDevice
        deletedOnServer = report.deletedOnServer
        alreadyGone = report.alreadyGone
        clientDeleted = report.clientDeleted
        revokedHere = report.local.revokedHere
        tokenSetsWiped = report.local.tokenSetsWiped
        registrationsWiped = report.local.registrationsWiped
        changed = report.changedSomething
    }
}

/// How people see values in tables: seconds precision, UTC, `-` for nothing.
enum HumanText {
    static func time(_ date: Date?) -> String {
        guard let date else { return "-" }
        return String(ISOTime.string(from: date).prefix(19)) + "Z"
    }

    /// Audit details as people read them: `name=value` pairs in name order, strings without quotes (quoted when
    /// they hold a blank or are empty), other values as JSON.
    static func details(_ value: JSONValue) -> String {
        guard case .object(let members) = value else { return value.canonicalJSON() }
        guard !members.isEmpty else { return "-" }
        return members.keys.sorted().map { name in
            guard let member = members[name] else { return name }
            if case .string(let text) = member {
                return name + "=" + (text.isEmpty || text.contains(where: \.isWhitespace) ? member.canonicalJSON() : text)
            }
            return name + "=" + member.canonicalJSON()
        }.joined(separator: " ")
    }

    static func text(_ value: String?) -> String {
        guard let value, !value.isEmpty else { return "-" }
        return value
    }

    /// A kid as tables show it: its first characters, as git shortens hashes (`--kid` takes any unique prefix
    /// that long), or all of it with `--wide`.
    static func kid(_ kid: String?, wide: Bool) -> String {
        guard let kid, !kid.isEmpty else { return "-" }
        return wide ? kid : String(kid.prefix(KeyManager.shortKidLength))
    }
}
