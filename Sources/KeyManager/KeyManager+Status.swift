import Foundation
import Storage

extension KeyManager {
    /// What `status` shows beyond the counts (issue 32): keys by state, PIN keys' attempts left, the server profiles,
    /// the last sync run and the wrong-PIN throttle. `visible`: the users the caller may see (nil: all).
    func overview(_ reader: StoreReader, into status: inout StoreStatus, lastSync: SyncStateRecord?,
                  visible: Set<String>?) throws {
        for count in try reader.keyCounts() where visible?.contains(count.userId) ?? true {
            status.keysByState[KeyStatus(count.status), default: 0] += count.count
        }
        status.pinKeys = try reader.pinKeyStates().filter { visible?.contains($0.userId) ?? true }.map {
            PINKeyState(kid: $0.kid, userId: $0.userId, status: KeyStatus($0.status), attemptsLeft: $0.attemptsLeft)
        }
        status.servers = try reader.servers().map { ServerSummary(name: $0.name, dialect: $0.dialect, baseURL: $0.baseUrl) }
        status.lastSyncRun = lastSync.map {
            SyncRun(server: $0.serverName, startedAt: $0.startedAt, finishedAt: $0.finishedAt, users: $0.users,
                    inSync: $0.inSync, registered: $0.registered, revoked: $0.revoked, serverDeleted: $0.serverDeleted,
                    orphans: $0.orphans, errors: $0.errors)
        }
        // Through the agent a person sees their own account's throttle only; run directly, every account's.
        let throttles = try context.caller.map { caller in try reader.pinThrottle(uid: Int64(caller.uid)).map { [$0] } ?? [] }
            ?? reader.pinThrottles()
        let now = now()
        status.pinThrottles = throttles.filter { $0.failures > 0 || ($0.blockedUntil.map { $0 > now } ?? false) }.map {
            PINThrottleState(uid: $0.uid, login: $0.login, failures: $0.failures,
                             blockedUntil: $0.blockedUntil.flatMap { $0 > now ? $0 : nil })
        }
    }
}
