import Foundation
import KeyManager
import ServerClients

/// One user's part of a sync plan: what to change locally and on the server.
public struct UserSyncPlan: Sendable, Equatable {
    public var userId: String
    /// Local changes that follow from the listing (rules 1 and 2, and rule 3's confirmations).
    public var changes: ServerChanges
    /// Retired keys the server still lists: DELETE them (rule 3).
    public var deleteOnServer: [ServerDevice] = []
    /// Listed records from this device whose kid is unknown here (rule 4).
    public var orphans: [ServerDevice] = []
    /// Listed active keys that needed no change.
    public var inSync: Int = 0
    /// Why this user could not be reconciled; when set, nothing changes for the user (rule 6).
    public var error: TransportError?

    public init(userId: String) {
        self.userId = userId
        self.changes = ServerChanges(userId: userId)
    }

    /// Whether carrying out the plan would change anything.
    public var isEmpty: Bool { changes.isEmpty && deleteOnServer.isEmpty && orphans.isEmpty }
}

/// The reconciler: a pure function from the local keys of a user and the server's listing to a plan.
public enum Reconciler {
    /// Whether `key` makes its user worth asking the server about: it is usable, or the server may still hold it.
    public static func isWorthReconciling(_ key: UserKey) -> Bool {
        KeyStatus.usable.contains(key.status) || key.serverState == .registered || key.serverState == .pendingDeletion
    }

    /// Plans one user's reconciliation.
    ///
    /// - Parameters:
    ///   - localKeys: every key row of the user (any status).
    ///   - listing: the server's complete listing for the user, or the failure that kept it from being complete.
    ///   - deviceId: this device's id, to recognise orphans of this device.
    ///   - knownKids: every kid this store has ever held (of any user), so another user's key is no orphan.
    public static func plan(userId: String, localKeys: [UserKey], listing: Result<[ServerDevice], TransportError>,
                            deviceId: String, knownKids: Set<String>) -> UserSyncPlan {
        var plan = UserSyncPlan(userId: userId)
        let devices: [ServerDevice]
        switch listing {
        case .failure(let failure):
            plan.error = failure
            return plan
        case .success(let listed):
            devices = listed
        }
        let listedByKid = Dictionary(devices.map { ($0.kid, $0) }, uniquingKeysWith: { first, _ in first })
        for key in localKeys {
            let usable = KeyStatus.usable.contains(key.status)
            if let device = listedByKid[key.kid] {
                if usable {
                    // Rule 1: registered and in step; mirror the server's name and last access.
                    let changesSomething = key.serverState != .registered
                        || (device.deviceName != nil && device.deviceName != key.deviceName)
                        || (device.lastAccessAt != nil && device.lastAccessAt.map(ISOTime.milliseconds) != key.serverLastAccessAt.map(ISOTime.milliseconds))
                    if changesSomething {
                        plan.changes.listed.append(.init(kid: key.kid, deviceName: device.deviceName, lastAccessAt: device.lastAccessAt))
                    } else {
                        plan.inSync += 1
                    }
                } else {
                    // Rule 3: retired here, still on the server.
                    plan.deleteOnServer.append(device)
                }
            } else if usable && key.serverState == .registered {
                // Rule 2: the server no longer holds it: an administrator or the user removed it.
                plan.changes.revokedByServer.append(key.kid)
            } else if key.serverState == .pendingDeletion {
                // Rule 3, confirmed by absence: someone already deleted it.
                plan.changes.deletedOnServer.append(key.kid)
            }
        }
        // Rule 4: records of this device that this store never held (the user's own keys count as held even when
        // they were bound after `knownKids` was read).
        let localKids = Set(localKeys.map(\.kid))
        plan.orphans = devices.filter { $0.deviceId == deviceId && !localKids.contains($0.kid) && !knownKids.contains($0.kid) }
        return plan
    }

    /// Rule 7: the most revocations a run may apply without `--force`: `percent` of the active keys, at least 1.
    public static func revocationLimit(activeKeys: Int, percent: Double) -> Int {
        max(1, Int((Double(activeKeys) * percent / 100).rounded(.down)))
    }
}
