import Foundation
import GRDB

/// One device-bound key of one user: the row of `user_keys`.
public struct UserKeyRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "user_keys"

    /// `active` keys sign; `locked` ones wait for a rebind; `revoked` and `superseded` are tombstones.
    public enum Status: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case active, locked, revoked, superseded
    }

    /// How the key's user proves presence: the Ping Device Binding auth types, by their wire names.
    public enum AuthType: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case none = "NONE"
        case applicationPIN = "APPLICATION_PIN"
        case biometricOnly = "BIOMETRIC_ONLY"
        case biometricAllowFallback = "BIOMETRIC_ALLOW_FALLBACK"
    }

    /// What the server knows of this key.
    public enum ServerState: String, Codable, Sendable, CaseIterable, DatabaseValueConvertible {
        case unregistered, registered, pendingDeletion, deleted
    }

    public var kid: String
    public var userId: String
    public var issuer: String
    public var authType: AuthType
    public var algorithm: String = "ES256"
    /// The public JWK, as JSON text.
    public var publicJwk: String
    /// The sealed private key; nil once the key material is destroyed.
    public var wrappedPrivateKey: Data?
    public var status: Status
    public var serverState: ServerState
    /// The name the server shows for this binding.
    public var deviceName: String?
    public var serverLastAccessAt: Date?
    public var createdAt: Date
    public var lastUsedAt: Date?
    public var revokedAt: Date?
    public var revokeReason: String?
    /// HMAC under a master-derived key over the fields that gate access (nil only before a legacy store is stamped).
    public var integrityMac: Data?
    /// Where the private half lives: `software` (sealed P-256 scalar) or `tpm` (sealed TPM-wrapped blob).
    public var keyBackend: String = "software"

    public init(kid: String, userId: String, issuer: String, authType: AuthType, publicJwk: String,
                wrappedPrivateKey: Data?, status: Status, serverState: ServerState, deviceName: String? = nil,
                serverLastAccessAt: Date? = nil, createdAt: Date, lastUsedAt: Date? = nil,
                revokedAt: Date? = nil, revokeReason: String? = nil) {
        self.kid = kid
        self.userId = userId
        self.issuer = issuer
        self.authType = authType
        self.publicJwk = publicJwk
        self.wrappedPrivateKey = wrappedPrivateKey
        self.status = status
        self.serverState = serverState
        self.deviceName = deviceName
        self.serverLastAccessAt = serverLastAccessAt
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.revokedAt = revokedAt
        self.revokeReason = revokeReason
    }
}

/// A key with its owner's username, as `list` shows it.
public struct KeyListing: Sendable, Equatable {
    public var key: UserKeyRecord
    public var username: String?

    public init(key: UserKeyRecord, username: String?) {
        self.key = key
        self.username = username
    }
}

/// A key as `list` shows it, without its key material: what `StoreReader.forEachListedKey` hands over per row.
public struct ListedKey: Sendable, Equatable {
    public var kid: String
    public var userId: String
    public var username: String?
    public var authType: UserKeyRecord.AuthType
    public var status: UserKeyRecord.Status
    public var serverState: UserKeyRecord.ServerState
    public var deviceName: String?
    public var serverLastAccessAt: Date?
    public var createdAt: Date
    public var lastUsedAt: Date?
    public var issuer: String
    public var revokedAt: Date?
    public var revokeReason: String?

    public init(kid: String, userId: String, username: String?, authType: UserKeyRecord.AuthType,
                status: UserKeyRecord.Status, serverState: UserKeyRecord.ServerState, deviceName: String?,
                serverLastAccessAt: Date?, createdAt: Date, lastUsedAt: Date?, issuer: String, revokedAt: Date?,
                revokeReason: String?) {
        self.kid = kid
        self.userId = userId
        self.username = username
        self.authType = authType
        self.status = status
        self.serverState = serverState
        self.deviceName = deviceName
        self.serverLastAccessAt = serverLastAccessAt
        self.createdAt = createdAt
        self.lastUsedAt = lastUsedAt
        self.issuer = issuer
        self.revokedAt = revokedAt
        self.revokeReason = revokeReason
    }
}
