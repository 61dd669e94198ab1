import Foundation
import Storage

/// How a key's user proves presence before the key signs (the Ping Device Binding auth types).
public enum AuthType: String, CaseIterable, Sendable, Codable {
    case none = "NONE"
    case applicationPIN = "APPLICATION_PIN"
    case biometricOnly = "BIOMETRIC_ONLY"
    case biometricAllowFallback = "BIOMETRIC_ALLOW_FALLBACK"

    /// Accepts the wire names (`APPLICATION_PIN`) or the flag names (`app-pin`), in any case.
    public init?(flag: String) {
        let normalized = flag.uppercased().replacingOccurrences(of: "-", with: "_")
        switch normalized {
        case "NONE": self = .none
        case "APPLICATION_PIN", "APP_PIN": self = .applicationPIN
        case "BIOMETRIC_ONLY": self = .biometricOnly
        case "BIOMETRIC_ALLOW_FALLBACK": self = .biometricAllowFallback
        default: return nil
        }
    }
}

/// The lifecycle of a key on this device.
public enum KeyStatus: String, CaseIterable, Sendable, Codable {
    case active, locked, revoked, superseded

    /// The statuses of keys that still hold key material.
    public static let usable: Set<KeyStatus> = [.active, .locked]
}

/// What the identity server knows of a key.
public enum KeyServerState: String, CaseIterable, Sendable, Codable {
    /// Made here; the server has not listed it yet.
    case unregistered
    /// The server lists it.
    case registered
    /// Retired here; to be deleted on the server by the next sync.
    case pendingDeletion
    /// Gone from the server.
    case deleted
}

/// A user's device-bound key, as `list` and `bind` show it (the Ping SDK's UserKey plus its lifecycle).
public struct UserKey: Sendable, Equatable {
    public var kid: String
    public var userId: String
    public var username: String?
    public var authType: AuthType
    public var status: KeyStatus
    public var serverState: KeyServerState
    public var createdAt: Date
    public var lastUsedAt: Date?
    /// The name the server shows for this binding, once known.
    public var deviceName: String?
    /// When the server last saw this binding used, as its listing says.
    public var serverLastAccessAt: Date?
    public var issuer: String
    public var revokedAt: Date?
    public var revokeReason: String?
    /// An APPLICATION_PIN key that is active or locked, as `list` reads it: the wrong PINs it still takes before it
    /// locks (0 when locked). Nil for other keys, and where the PIN record was not read.
    public var pinAttemptsLeft: Int?
    /// The login of the person who owns the key's identity user (a person link), when `list` read it.
    public var owner: String?

    public init(kid: String, userId: String, username: String?, authType: AuthType, status: KeyStatus, serverState: KeyServerState,
                createdAt: Date, lastUsedAt: Date?, deviceName: String?, serverLastAccessAt: Date?, issuer: String,
                revokedAt: Date?, revokeReason: String?) {
        self.kid = kid
        self.userId = userId
        self.username = username
        self.authType = authType
        self.status = status
        self.serverState = serverState
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.deviceName = deviceName
        self.serverLastAccessAt = serverLastAccessAt
        self.issuer = issuer
        self.revokedAt = revokedAt
        self.revokeReason = revokeReason
    }
}

/// A user known on this device.
public struct UserSummary: Sendable, Equatable {
    public var userId: String
    public var username: String?
    /// Active or locked keys the user holds here.
    public var activeKeys: Int
    public var createdAt: Date
    /// The login of the person linked to this identity user, if any.
    public var owner: String?
}

/// What `keymgr status` reports.
public struct StoreStatus: Sendable, Equatable {
    public var deviceId: String
    public var deviceName: String
    public var schemaVersion: Int
    public var users: Int
    public var keys: Int
    public var lastSync: Date?
    /// Where new keys live (`software` or `tpm`), and why init chose it.
    public var keyBackend: KeyBackendKind = .software
    public var keyBackendReason: String?
    /// The pinned TCTI of a TPM store.
    public var tpmTcti: String?
    /// Server profiles whose clock, as their answers' `Date` header showed it, is more than a minute from this
    /// device's: seconds the server is ahead (negative: behind), by profile name.
    public var serverClockSkews: [ServerClockSkew] = []
    /// Where this process took the master key from: `home` (master.key), `tpm` (master.tpm, sealed to a TPM),
    /// `KEYMGR_MASTER_KEY_FILE` or `systemd-credential`; the file; and for `tpm` the TPM's TCTI.
    package var masterKeySource: String = "home"
    package var masterKeyLocation: String?
    package var masterKeyTCTI: String?
    /// Keys by status (of the users the caller may see, through the agent).
    public var keysByState: [KeyStatus: Int] = [:]
    /// Active and locked APPLICATION_PIN keys (of the users the caller may see): wrong PINs each still takes.
    public var pinKeys: [PINKeyState] = []
    /// The identity server profiles this store syncs with.
    public var servers: [ServerSummary] = []
    /// The last sync run, with its counts; nil when none ran.
    public var lastSyncRun: SyncRun?
    /// Callers held back by the wrong-PIN throttle (through the agent: the caller only).
    public var pinThrottles: [PINThrottleState] = []
    /// A TPM store whose TPM was cleared or replaced: why, and the keys (of the users the caller may see) that are
    /// unusable; nil otherwise, and when the TPM does not answer.
    public var tpmReplaced: TPMReplacement?
}

/// An active or locked APPLICATION_PIN key as `status` shows it.
public struct PINKeyState: Sendable, Equatable {
    public var kid: String
    public var userId: String
    public var status: KeyStatus
    /// Wrong PINs the key still takes before it locks (0: locked).
    public var attemptsLeft: Int
}

/// An identity server profile as `status` shows it.
public struct ServerSummary: Sendable, Equatable {
    public var name: String
    public var dialect: String
    public var baseURL: String
}

/// The last sync run: when, and what it found.
public struct SyncRun: Sendable, Equatable {
    public var server: String
    public var startedAt: Date
    /// Nil while the run is going on (or was killed).
    public var finishedAt: Date?
    public var users: Int
    public var inSync: Int
    public var registered: Int
    public var revoked: Int
    public var serverDeleted: Int
    public var orphans: Int
    /// Users it could not reconcile.
    public var errors: Int
}

/// One calling OS account's wrong PINs for other people's keys (the agent's throttle).
public struct PINThrottleState: Sendable, Equatable {
    public var uid: Int64
    public var login: String
    /// Wrong PINs in the current 10-minute window.
    public var failures: Int
    /// Until when its PIN attempts on other people's keys wait; nil when they do not.
    public var blockedUntil: Date?
}

/// A server's clock as far from this device's as `keymgr status` reports (more than `StoreStatus.reportedSkew`).
public struct ServerClockSkew: Sendable, Equatable {
    public var serverName: String
    /// Seconds the server is ahead of this device (negative: behind).
    public var seconds: Int64
}

extension StoreStatus {
    /// The smallest skew, in seconds, `status` reports.
    public static let reportedSkew: Int64 = 60
}

/// Where `init` keeps the master key.
public enum MasterKeyChoice: String, Sendable, CaseIterable {
    /// `$KEYMGR_HOME/master.key`, mode 0600 (or the file systemd or KEYMGR_MASTER_KEY_FILE supplies).
    case file
    /// Sealed to the TPM at the store's TCTI: `$KEYMGR_HOME/master.tpm` holds only the TPM's blob.
    case tpm
}

/// Settings chosen when a store is created.
public struct InitOptions: Sendable {
    public var deviceName: String?
    /// The default `iss` of binding and signing JWS.
    public var issuer: String = "keymgr"
    /// Wrong PINs before a key locks (NIST SP 800-63B allows at most 10).
    public var pinRetry: Int = 5
    /// Shortest PIN accepted: 6 by default, as NIST SP 800-63B rev. 4 asks; 4 at the least.
    public var pinMinLength: Int = 6
    public var argon2: Argon2Parameters = .rfc9106SecondRecommendation
    /// argv of the biometric verifier command; `{osUser}` and `{userId}` are substituted.
    public var biometricVerifier: [String]?
    /// argv of the device-credential verifier command (the fallback of BIOMETRIC_ALLOW_FALLBACK).
    public var credentialVerifier: [String]?
    /// Where keys live: `software`, `tpm`, or `auto` (the TPM when one answers at `tpmTcti`, else software).
    public var keyBackend: KeyBackendChoice = .auto
    /// The TCTI keymgr talks to the TPM through, pinned in the device row (libtss2 never chooses one).
    public var tpmTcti: String = TPMKeyBackend.defaultTCTI
    /// Dictionary-attack parameters `init --key-backend tpm` sets: failures before lockout, and seconds after which
    /// the TPM forgets one (see docs/security.md "TPM key backend").
    public var tpmMaxTries: UInt32 = 32
    public var tpmRecoveryTime: UInt32 = 600
    /// Where the master key is kept: a file (the default) or sealed to the TPM at `tpmTcti` (with either key backend).
    public var masterKey: MasterKeyChoice = .file
    /// Accepts a TCTI over TCP (`--tpm-tcti-allow-network`), which every local user can reach (see `TCTIReach`).
    public var tpmTctiAllowNetwork = false

    public init() {}
}

/// Supplies a secret (a PIN) only when the operation turns out to need one.
public typealias SecretProvider = () throws -> SecretBytes

/// What to bind.
public struct BindRequest: Sendable {
    public var userId: String
    public var username: String?
    public var authType: AuthType = .none
    /// The `iss` of the binding JWS and the issuer the key belongs to; nil means the store's default.
    public var issuer: String?
    /// A server challenge: when given, the result carries a binding JWS over it.
    public var challenge: String?
    /// Lifetime of the binding JWS in seconds (`exp = iat + expiresIn`).
    public var expiresIn: Int = 60
    /// How long a biometric or device-credential verifier may take.
    public var verifierTimeout: TimeInterval = 60

    public init(userId: String) {
        self.userId = userId
    }
}

/// A new key, its public JWK and, when a challenge was given, the binding JWS.
public struct BindResult: Sendable {
    public var key: UserKey
    public var jwk: JWK
    public var jws: String?
}

/// What to sign: the key is picked by `kid`, or by `userId` when the user holds exactly one usable key.
public struct SignRequest: Sendable {
    public var userId: String?
    public var kid: String?
    /// The server's challenge; a random one is made when nil.
    public var challenge: String?
    /// Custom claims; the reserved names `sub`, `exp`, `iat`, `nbf`, `iss`, `challenge` are refused.
    public var claims: [String: JSONValue] = [:]
    /// The `iss` claim; nil means the key's issuer.
    public var issuer: String?
    public var expiresIn: Int = 60
    public var verifierTimeout: TimeInterval = 60

    public init(userId: String?, kid: String?) {
        self.userId = userId
        self.kid = kid
    }
}

/// A signing JWS and the key that made it.
public struct SignResult: Sendable {
    public var kid: String
    public var jws: String
}

/// One entry of the audit log.
public struct AuditEntry: Sendable, Equatable {
    public var seq: Int64
    public var at: String
    public var event: String
    public var userId: String?
    public var kid: String?
    /// The OS user who ran keymgr.
    public var actor: String
    /// A JSON object; never holds a secret.
    public var details: JSONValue
    public var hash: String
    public var prevHash: String
    /// The login of the person linked to `userId` now (a person link), if any.
    public var owner: String? = nil
}

/// The outcome of `master rotate`.
public struct MasterKeyRotation: Sendable {
    public var secretsRewrapped: Int
}

extension UserKey {
    init(_ record: UserKeyRecord, username: String?) {
        self.init(kid: record.kid, userId: record.userId, username: username,
                  authType: AuthType(record.authType),
                  status: KeyStatus(record.status),
                  serverState: KeyServerState(record.serverState), createdAt: record.createdAt, lastUsedAt: record.lastUsedAt,
                  deviceName: record.deviceName, serverLastAccessAt: record.serverLastAccessAt, issuer: record.issuer, revokedAt: record.revokedAt,
                  revokeReason: record.revokeReason)
    }
}

extension UserKey {
    init(_ row: ListedKey) {
        self.init(kid: row.kid, userId: row.userId, username: row.username, authType: AuthType(row.authType),
                  status: KeyStatus(row.status), serverState: KeyServerState(row.serverState), createdAt: row.createdAt,
                  lastUsedAt: row.lastUsedAt, deviceName: row.deviceName, serverLastAccessAt: row.serverLastAccessAt,
                  issuer: row.issuer, revokedAt: row.revokedAt, revokeReason: row.revokeReason)
        pinAttemptsLeft = row.pinAttemptsLeft
        owner = row.owner
    }
}

// The domain's enums and the records' column enums name the same values; these convert without a fallback.
extension KeyStatus {
    init(_ status: UserKeyRecord.Status) {
        switch status {
        case .active: self = .active
        case .locked: self = .locked
        case .revoked: self = .revoked
        case .superseded: self = .superseded
        }
    }

    var record: UserKeyRecord.Status {
        switch self {
        case .active: .active
        case .locked: .locked
        case .revoked: .revoked
        case .superseded: .superseded
        }
    }
}

extension KeyServerState {
    init(_ state: UserKeyRecord.ServerState) {
        switch state {
        case .unregistered: self = .unregistered
        case .registered: self = .registered
        case .pendingDeletion: self = .pendingDeletion
        case .deleted: self = .deleted
        }
    }
}

extension AuthType {
    init(_ authType: UserKeyRecord.AuthType) {
        switch authType {
        case .none: self = .none
        case .applicationPIN: self = .applicationPIN
        case .biometricOnly: self = .biometricOnly
        case .biometricAllowFallback: self = .biometricAllowFallback
        }
    }

    var record: UserKeyRecord.AuthType {
        switch self {
        case .none: .none
        case .applicationPIN: .applicationPIN
        case .biometricOnly: .biometricOnly
        case .biometricAllowFallback: .biometricAllowFallback
        }
    }
}

/// Which audit entries to show: all of those matching every given field.
public struct AuditFilter: Sendable, Equatable {
    public var userId: String?
    public var since: Date?
    public var event: String?
    /// Only the newest `newest` matching entries.
    public var newest: Int?
    /// Newest first instead of oldest first.
    public var newestFirst: Bool

    public init(userId: String? = nil, since: Date? = nil, event: String? = nil, newest: Int? = nil,
                newestFirst: Bool = false) {
        self.userId = userId
        self.since = since
        self.event = event
        self.newest = newest
        self.newestFirst = newestFirst
    }
}

/// The result of checking the audit chain: how many entries held, and the first that does not, if any.
public struct AuditVerification: Sendable, Equatable {
    /// Where the chain breaks, and why.
    public struct Break: Sendable, Equatable {
        public var seq: Int64
        public var reason: String
    }

    /// A row, or a table's set of rows, that does not hold under the master key.
    public struct RowIssue: Sendable, Equatable {
        /// The table.
        public var table: String
        /// The row by its primary key (`kid=…`), or nil for the table's set of rows.
        public var row: String?
        public var reason: String
    }

    public var checked: Int
    public var firstBad: Break?
    /// Rows checked against their MACs (the device row included).
    public var rowsChecked: Int = 0
    /// Every row and table set that does not hold, table by table.
    public var rowIssues: [RowIssue] = []

    public var isIntact: Bool { firstBad == nil && rowIssues.isEmpty }
}
