import ArgumentParser
import Foundation
import KeyManager
import Logging
import Synchronization
import Sync

/// `keymgr sync`: reconciles the local keys with the identity server's registered devices.
struct SyncCommand: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Reconcile this device's keys with the identity server.",
        usage: "keymgr sync [<options>] [--dry-run] [--prune-orphans] [--force]",
        discussion: """
            Lists every user's device bindings on the configured server (`keymgr server set`) and follows \
            the sync rules (docs/sync.md): keys the server lists are marked registered, keys an administrator removed \
            there are revoked here, keys retired here are deleted there, and bindings of this device unknown \
            here are reported as orphans (deleted with --prune-orphans). A user whose listing fails is left \
            untouched. One sync runs at a time per store: an overlapping run exits 75 at once.

            With --json: {"dryRun", "applied", "users", "inSync", "registered", "revoked", "serverDeleted", "orphans",\
            "errors":[{"userId", "code", "message"}], "writes", "writesByKind", "unregistered", \
            "registrationsWiped", "registrationsRefused"}; the lists hold kids (the registrations lists, users). \
            A user whose registration access token the server refused with 400 access_denied or 403 is one \
            error once, then listed in "registrationsRefused" and not asked again (`keymgr dcr forget` removes \
            it). "writesByKind" says what the writes were; "unregistered" names the keys bound here (without --journey) that the server does not hold.

            Exit status: 0 all users reconciled, 2 some users could not be (the report is still printed), \
            3 the safety valve stopped the run (nothing applied), 75 another sync is running, 78 no server \
            or admin credential configured.

            Example:
              keymgr sync --json --max-revoke 10 --timeout 30
            """)

    @OptionGroup var globals: GlobalOptions

    @OptionGroup var table: TableOptions

    @Flag(help: "Plan and report, change nothing here or on the server.")
    var dryRun = false

    @Flag(help: "Delete bindings of this device that this store never held from the server.")
    var pruneOrphans = false

    @Option(help: ArgumentHelp(
        "Revoke at most this percentage of the active keys in one run (at least 1 key) unless --force (default: 20).",
        valueName: "percent"))
    var maxRevoke: Double?

    @Flag(help: "Apply revocations even beyond --max-revoke (check the server first).")
    var force = false

    @OptionGroup var network: NetworkOptions

    @OptionGroup var fleet: FleetOptions

    func validate() throws {
        if let maxRevoke, !(0...100).contains(maxRevoke) { throw ValidationError("--max-revoke must be a percentage from 0 to 100") }
    }

    func run(in context: CommandContext) throws {
        // The lease comes first: an overlapping run leaves before touching the store or the server.
        let lease = try SyncLease(home: globals.storeHome(in: context))
        defer { lease.release() }
        let console = globals.console(in: context)
        let manager = try globals.openManager(in: context)
        let connection = try ServerConnection.configured(in: manager, profile: network.profile, timeout: network.timeout, environment: context.environment)
        let service = SyncService(manager: manager, connection: connection, home: globals.storeHome(in: context), logger: globals.logger(in: context))
        let options = {
            var options = SyncOptions()
            options.dryRun = dryRun
            options.pruneOrphans = pruneOrphans
            options.maxRevokePercent = maxRevoke ?? options.maxRevokePercent
            options.force = force
            options.concurrency = fleet.concurrency
            return options
        }()
        console.detail("syncing with \(connection.settings.baseURL.absoluteString) (realm \(connection.settings.realmPath))")

        let progress = ProgressLine(in: context, enabled: !globals.quiet)
        let report: SyncReport
        do {
            defer { progress.clear() }
            report = try AsyncBridge.wait { try await service.run(options) { progress.show(done: $0, total: $1) } }
        }

        let outcome = report.outcome
        if report.noDeviceRegistry {
            console.warn("the \(connection.settings.dialect.rawValue) server has no device registry: only client registrations are checked")
        }
        // What the valve holds back is shown, so the operator can judge it before forcing anything.
        try globals.render(SyncOutput(report: report, pruneOrphans: pruneOrphans, wide: table.wide), in: context)
        switch outcome {
        case .reconciled:
            return
        case .someUsersFailed(let errors):
            for error in errors {
                context.streams.error.write("keymgr: \(TextTable.printable(error.userId)): \(TextTable.printable(error.message)) (\(error.code.rawValue))\n")
            }
            throw ExitCode(2)
        case .failed(let failure):
            throw FailureAfterReport(failure.code, TextTable.printable(failure.message))
        }
    }
}

/// A `\r`-updated progress line on stderr (only when it is a terminal), cleared when the work ends.
final class ProgressLine: Sendable {
    private let stream: StandardStream
    private let enabled: Bool
    private let label: String
    private let shown = Mutex(false)

    /// A line on the request's stderr, drawn only when it is a terminal and `enabled`.
    init(in context: CommandContext, enabled: Bool, label: String = "syncing") {
        self.stream = context.streams.error
        self.enabled = enabled && context.errorIsTerminal
        self.label = label
    }

    func show(done: Int, total: Int) {
        guard enabled else { return }
        shown.withLock { shown in
            stream.write("\r\(label): \(done)/\(total) users\u{1B}[K")
            shown = true
        }
    }

    func clear() {
        shown.withLock { shown in
            if shown { stream.write("\r\u{1B}[K") }
            shown = false
        }
    }
}

/// `sync`: `SyncReportJSON`, or for people a table of what changed (kid and user) and a one-line summary (against a
/// server with no device registry: the client registrations it revoked).
struct SyncOutput: DocumentOutput {
    let report: SyncReport
    let pruneOrphans: Bool
    let wide: Bool

    var document: SyncReportJSON { SyncReportJSON(report) }

    func text(on console: Console) {
        if report.noDeviceRegistry {
            console.answer("\(report.registrationsWiped.count) client registrations revoked by the server and wiped here"
                + report.registrationsWiped.map { "\n  \(TextTable.printable($0))" }.joined())
            if !report.registrationsRefused.isEmpty {
                console.answer("\(report.registrationsRefused.count) client registrations whose access token the server "
                    + "refuses (not asked again; `keymgr dcr forget --user U` removes one here)"
                    + report.registrationsRefused.map { "\n  \(TextTable.printable($0))" }.joined())
            }
            return
        }
        var rows: [[String]] = []
        for (change, kids) in [("registered", report.registered), ("revoked", report.revoked),
                               ("deleted on server", report.serverDeleted)] {
            rows += kids.map { [change, HumanText.text(report.owners[$0]), $0] }
        }
        let orphanChange = pruneOrphans && !report.dryRun ? "orphan, deleted" : "orphan"
        rows += report.orphans.map { [orphanChange, "-", $0] }
        if !rows.isEmpty {
            let heading = report.safetyValveTripped ? "HELD BACK" : report.dryRun ? "PLANNED" : "CHANGE"
            console.table([.whole(heading), TableColumn("USER ID"), .whole("KID")],
                          rows.map { [$0[0], $0[1], HumanText.kid($0[2], wide: wide)] }, empty: "", wide: wide)
        }
        if report.safetyValveTripped {
            console.answer("safety valve: nothing applied; \(report.revoked.count) revocations held back")
            return
        }
        var summary = report.dryRun ? "dry run, nothing written: " : ""
        summary += "\(report.users) users checked: \(report.registered.count) newly registered, \(report.revoked.count) revoked, "
            + "\(report.serverDeleted.count) deleted on the server, \(report.orphans.count) orphans, "
            + "\(report.errors.count) users with errors; \(report.inSync) keys unchanged"
        if !report.dryRun { summary += Self.writes(report.writesByKind) }
        console.answer(summary)
        if !report.unregistered.isEmpty {
            let kids = report.unregistered.prefix(5).map { HumanText.kid($0, wide: wide) }.joined(separator: ", ")
            console.answer("\(report.unregistered.count) keys bound here are not registered at the server (bound without "
                + "--journey, so it cannot check their signatures): \(kids)\(report.unregistered.count > 5 ? ", …" : ""); "
                + "register them with `keymgr bind --journey NAME --user ID --replace`")
        }
        if !report.orphans.isEmpty && !pruneOrphans {
            console.warn("orphans are bindings of this device the store never held: `keymgr sync --prune-orphans` deletes them on the server")
        }
    }

    /// `, 63 writes (60 server names or last accesses mirrored, 3 registrations)`: the writes by kind, the empty kinds left out.
    static func writes(_ writes: SyncWrites) -> String {
        guard writes.total > 0 else { return ", 0 writes" }
        let kinds = [(writes.registered, "for registrations"), (writes.mirrored, "server names or last accesses mirrored"),
                     (writes.revoked, "for revocations"), (writes.serverDeleted, "for deletions on the server"),
                     (writes.orphansPruned, "for pruned orphans"), (writes.credentialsWiped, "for wiped credentials"),
                     (writes.registrationsWiped, "for wiped client registrations")]
            .filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }
        return ", \(writes.total) writes (\(kinds.joined(separator: ", ")))"
    }
}
