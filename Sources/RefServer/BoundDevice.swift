import Foundation
import KeymgrCore

/// One device binding record, as PingAM keeps it under a user's profile
/// (`/users/{user}/devices/2fa/binding`).
///
/// `uuid` is the record's `_id` and equals `key["kid"]`: the kid the client generated at bind time is
/// the join key between keymgr's store and the server.
public struct BoundDevice: Sendable, Equatable {
    /// The record id (`_id` and `uuid` on the wire); equals the key's `kid`.
    public var uuid: String
    /// The realm the record lives in, e.g. `/realms/root` or `/realms/root/realms/alpha`.
    public var realmPath: String
    /// The user the record belongs to: the `{user}` path segment of the device REST (the username).
    public var user: String
    /// The record revision (`_rev`); changes on every update.
    public var revision: String
    /// The client's device id (`IDToken1deviceId` at bind time).
    public var deviceId: String
    /// The device name; renamed with `PUT … If-Match: *`.
    public var deviceName: String
    /// When the record was created, epoch milliseconds.
    public var createdDate: Int64
    /// When a signing journey last verified a signature with this key, epoch milliseconds.
    public var lastAccessDate: Int64
    /// The public JWK (`kty`, `crv`, `x`, `y`, `kid`, `use`, `alg`), all string members.
    public var key: [String: String]
    /// PingAM's `deviceManagementStatus`; always false for bound devices here.
    public var deviceManagementStatus: Bool

    /// Creates a record; `revision` defaults to a fresh one.
    public init(
        uuid: String, realmPath: String, user: String, revision: String? = nil, deviceId: String,
        deviceName: String, createdDate: Int64, lastAccessDate: Int64, key: [String: String],
        deviceManagementStatus: Bool = false
    ) {
        self.uuid = uuid
        self.realmPath = realmPath
        self.user = user
        self.revision = revision ?? BoundDevice.newRevision()
        self.deviceId = deviceId
        self.deviceName = deviceName
        self.createdDate = createdDate
        self.lastAccessDate = lastAccessDate
        self.key = key
        self.deviceManagementStatus = deviceManagementStatus
    }

    /// A new `_rev` value: PingAM's revisions are opaque decimal strings.
    static func newRevision() -> String {
        String(UInt32.random(in: 1...UInt32.max))
    }

    /// The record exactly as PingAM's device REST returns it.
    var wireJSON: JSONValue {
        .object([
            "_id": .string(uuid),
            "_rev": .string(revision),
            "uuid": .string(uuid),
            "deviceId": .string(deviceId),
            "deviceName": .string(deviceName),
            "createdDate": .int(createdDate),
            "lastAccessDate": .int(lastAccessDate),
            "key": .object(key.mapValues { .string($0) }),
            "deviceManagementStatus": .bool(deviceManagementStatus),
        ])
    }

    /// The record with the realm and user it belongs to, for the admin listing (not a PingAM shape).
    var adminJSON: JSONValue {
        guard case .object(var members) = wireJSON else { return wireJSON }
        members["realm"] = .string(realmPath)
        members["user"] = .string(user)
        return .object(members)
    }
}

/// A user of the reference server's identity store.
public struct ReferenceUser: Sendable, Equatable {
    /// The realm the user lives in.
    public var realmPath: String
    /// The username: what the NameCallback carries and the device REST's `{user}` segment.
    public var username: String

    /// Creates a user description.
    public init(realmPath: String, username: String) {
        self.realmPath = realmPath
        self.username = username
    }
}
