import Foundation

/// A server's registry of the devices bound to its users: what `keymgr sync` reconciles with and `keymgr admin`
/// manages. Sync and admin see only this; PingAM's device REST (`PingAM/PingAMDeviceClient.swift`) is one, and a
/// dialect with another registry adds a client conforming to it (docs/architecture.md, "Adding a dialect").
public protocol DeviceRegistry: Sendable {
    /// Every binding `userId` has at the server (complete, or an error: never a partial listing).
    func listDevices(userId: String) async throws -> [ServerDevice]

    /// Deletes the binding `uuid` of `userId`. Both a deletion and "already gone" confirm it is not on the server.
    /// - Returns: true when this request deleted it, false when the server had no such binding.
    @discardableResult
    func deleteDevice(userId: String, uuid: String) async throws -> Bool
}

/// A device-binding record as a server's registry lists it.
public struct ServerDevice: Sendable, Equatable {
    /// The server's id of the binding (PingAM: `_id` = `uuid` = the key's kid).
    public var uuid: String
    public var kid: String
    public var deviceId: String?
    public var deviceName: String?
    public var createdAt: Date?
    public var lastAccessAt: Date?

    public init(uuid: String, kid: String, deviceId: String?, deviceName: String?, createdAt: Date?, lastAccessAt: Date?) {
        self.uuid = uuid
        self.kid = kid
        self.deviceId = deviceId
        self.deviceName = deviceName
        self.createdAt = createdAt
        self.lastAccessAt = lastAccessAt
    }
}
