import Foundation
import KeyManager
import Logging
import ServerClients

/// How a sync run behaves.
public struct SyncOptions: Sendable {
    /// Plan and report, write nothing anywhere.
    public var dryRun = false
    /// Delete orphan records of this device from the server (rule 4).
    public var pruneOrphans = false
    /// Rule 7: the share of active keys one run may revoke without `force`.
    public var maxRevokePercent: Double = 20
    public var force = false
    /// Users listed at once.
    public var concurrency = 8

    public init() {}
}

/// What a sync run did (or, with `dryRun`, would do).
public struct SyncReport: Sendable, Equatable {
    /// A user the run could not reconcile: the code and message of the error.
    public typealias UserError = SyncSummary.UserError

    public var dryRun: Bool
    /// Users whose listing was asked for.
    public var users = 0
    /// Active keys the server lists that needed no change.
    public var inSync = 0
    /// Kids first seen on the server in this run.
    public var registered: [String] = []
    /// Kids revoked here because the server no longer holds them.
    public var revoked: [String] = []
    /// Kids recorded as deleted on the server (deleted by this run or found gone).
    public var serverDeleted: [String] = []
    /// Kids of records of this device that this store never held.
    public var orphans: [String] = []
    public var errors: [UserError] = []
    /// Rows the reconciliation wrote to the store (the run's own bookkeeping row aside).
    public var writes = 0
    /// Rule 7 stopped the run: nothing was applied.
    public var safetyValveTripped = false
    /// When the valve trips: how many revocations were planned and how many are allowed.
    public var plannedRevocations = 0
    public var revocationLimit = 0
    /// The server keeps no device registry (an OAuth dialect): there were no device bindings to reconcile.
    public var noDeviceRegistry = false
    /// Users whose client registration the server no longer knows (rule 5): registration, tokens and DPoP key wiped.
    public var registrationsWiped: [String] = []
    /// How many client registrations rule 5 read (each failed read is one entry of `errors`).
    public var registrationsChecked = 0

    /// An empty report: a run that had nothing to reconcile.
    public init(dryRun: Bool) {
        self.dryRun = dryRun
    }
}

/// Reconciles the local keys with the server's registered devices (docs/sync.md, rules 1–4 and 6–10).
public struct SyncService: Sendable {
    public let manager: KeyManager
    let connection: ServerConnection
    /// The store's home: registration reads (rule 5) take the per-user lock there that refreshes take.
    let home: StoreLocation
    let logger: Logger

    public init(manager: KeyManager, connection: ServerConnection, home: StoreLocation, logger: Logger) {
        self.manager = manager
        self.connection = connection
        self.home = home
        self.logger = logger
    }

    /// Runs one sync. The caller holds the `SyncLease`.
    /// - Parameter progress: called with (users done, users in all) as listings arrive.
    public func run(_ options: SyncOptions, progress: @Sendable (Int, Int) -> Void = { _, _ in }) async throws -> SyncReport {
        guard let devices = try connection.deviceClient() else {
            // An OAuth server keeps no device registry: only its registrations are checked (rule 5).
            var report = SyncReport(dryRun: options.dryRun)
            report.noDeviceRegistry = true
            try await checkRegistrations(&report, options)
            return report
        }
        let startedAt = Date()
        let identity = try manager.deviceIdentity()
        let localKeys = try manager.allKeys()
        let knownKids = Set(localKeys.map(\.kid))
        let keysByUser = Dictionary(grouping: localKeys, by: \.userId)
        let userIds = Reconciler.usersToReconcile(localKeys)
        logger.debug("reconciling users with the server", metadata: [
            "users": .stringConvertible(userIds.count), "server": .string(connection.settings.baseURL.absoluteString),
        ])

        // Listings, a bounded number at a time; one user's failure is that user's alone (rule 6).
        var plans: [UserSyncPlan] = []
        plans.reserveCapacity(userIds.count)
        try await withThrowingTaskGroup(of: UserSyncPlan.self) { group in
            var next = 0
            func schedule() {
                guard next < userIds.count else { return }
                let userId = userIds[next]
                next += 1
                let keys = keysByUser[userId] ?? []
                group.addTask {
                    let listing: Result<[ServerDevice], TransportError>
                    do {
                        listing = .success(try await devices.listDevices(userId: userId))
                    } catch let failure as TransportError {
                        listing = .failure(failure)
                    } catch {
                        listing = .failure(TransportError(.unavailable, "\(error)"))
                    }
                    return Reconciler.plan(userId: userId, localKeys: keys, listing: listing,
                                           deviceId: identity.deviceId, knownKids: knownKids)
                }
            }
            for _ in 0..<max(1, options.concurrency) { schedule() }
            while let plan = try await group.next() {
                plans.append(plan)
                progress(plans.count, userIds.count)
                schedule()
            }
        }
        plans.sort { $0.userId < $1.userId }

        var report = SyncReport(dryRun: options.dryRun)
        report.users = userIds.count
        for plan in plans {
            report.inSync += plan.inSync
            report.orphans += plan.orphans.map(\.kid)
            if let error = plan.error {
                report.errors.append(.init(userId: plan.userId, code: error.code.rawValue, message: error.message))
            }
        }

        // Rule 7: too many revocations at once looks like a server fault, not a wave of stolen devices.
        let activeKeys = localKeys.filter { $0.status == .active }.count
        let planned = plans.reduce(0) { $0 + $1.changes.revokedByServer.count }
        report.plannedRevocations = planned
        report.revocationLimit = Reconciler.revocationLimit(activeKeys: activeKeys, percent: options.maxRevokePercent)
        if planned > report.revocationLimit && !options.force {
            // Nothing is applied; the report lists what the valve held back.
            report.safetyValveTripped = true
            report.revoked = plans.flatMap(\.changes.revokedByServer)
            return report
        }

        if options.dryRun {
            for plan in plans where plan.error == nil {
                let known = Dictionary(uniqueKeysWithValues: (keysByUser[plan.userId] ?? []).map { ($0.kid, $0) })
                report.registered += plan.changes.listed.filter { known[$0.kid]?.serverState == .unregistered }.map(\.kid)
                report.revoked += plan.changes.revokedByServer
                report.serverDeleted += plan.changes.deletedOnServer + plan.deleteOnServer.map(\.kid)
            }
            return report
        }

        for plan in plans where plan.error == nil && !plan.isEmpty {
            do {
                let outcome = try await execute(plan, devices: devices, options: options)
                report.registered += outcome.registered
                report.revoked += outcome.revoked
                report.serverDeleted += outcome.serverDeleted
                report.writes += outcome.writes
            } catch let failure as TransportError {
                report.errors.append(.init(userId: plan.userId, code: failure.code.rawValue, message: failure.message))
            } catch let error as KeyManagerError where error.code != .busy {
                report.errors.append(.init(userId: plan.userId, code: error.code.rawValue, message: error.message))
            }
        }
        try await checkRegistrations(&report, options)
        try record(report, serverName: connection.settings.name, startedAt: startedAt)
        return report
    }

    /// Server deletions first, then the user's local changes in one transaction; a failed deletion changes
    /// nothing locally for the user, and the next run retries it.
    private func execute(_ plan: UserSyncPlan, devices: PingAMDeviceClient, options: SyncOptions) async throws -> ServerChangesOutcome {
        var changes = plan.changes
        for device in plan.deleteOnServer {
            try await devices.deleteDevice(userId: plan.userId, uuid: device.uuid)
            changes.deletedOnServer.append(device.kid)
        }
        if options.pruneOrphans {
            for orphan in plan.orphans {
                try await devices.deleteDevice(userId: plan.userId, uuid: orphan.uuid)
                changes.prunedOrphans.append(orphan.kid)
            }
        }
        if !changes.revokedByServer.isEmpty { await deleteClient(of: plan.userId) }
        return try manager.apply(changes)
    }

    /// Rule 2's companion: the server revoked a binding of this device, and the user's client registration belongs to
    /// this device too. Deleting the client at the server (RFC 7592) is best effort; `apply` wipes it here in any case,
    /// so a device that lost its binding never keeps a usable client.
    private func deleteClient(of userId: String) async {
        do {
            let service = RegistrationService(manager: manager, connection: connection, home: home, logger: logger)
            if try await service.deleteAtServer(userId: userId) {
                logger.debug("deleted the client registration at the server", metadata: ["user": .string(userId)])
            }
        } catch {
            logger.warning("could not delete the client registration at the server; it is wiped here all the same",
                           metadata: ["user": .string(userId), "error": .string("\(error)")])
        }
    }

    /// Rule 5: each registration's management GET; a 401 wipes the registration, its tokens and DPoP key. A dry run
    /// skips it (a read rotates Curity's credentials, which must then be stored).
    private func checkRegistrations(_ report: inout SyncReport, _ options: SyncOptions) async throws {
        let registrations = try manager.registrations()
        guard !options.dryRun, !registrations.isEmpty else { return }
        let outcome = await RegistrationService(manager: manager, connection: connection, home: home, logger: logger).checkAll()
        report.registrationsChecked = outcome.checked
        report.registrationsWiped = outcome.wiped
        report.writes += outcome.wiped.count
        report.errors += outcome.errors
    }

    private func record(_ report: SyncReport, serverName: String, startedAt: Date) throws {
        try manager.recordSync(SyncSummary(
            serverName: serverName, startedAt: startedAt, finishedAt: Date(), users: report.users, inSync: report.inSync,
            registered: report.registered.count, revoked: report.revoked.count, serverDeleted: report.serverDeleted.count,
            orphans: report.orphans.count, errors: report.errors))
    }
}
