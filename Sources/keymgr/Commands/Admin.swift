import ArgumentParser
import Foundation
import KeyManager
import Sync

/// `keymgr admin`: an administrator's view of the users' bindings on the identity server.
struct Admin: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin",
        abstract: "List, find stale and revoke users' device bindings on the server.",
        discussion: """
            For administrators: the bindings the configured PingAM server holds for the users this store knows, \
            whichever device made them. Needs the admin credential of `keymgr server set`; a server without a \
            device registry (dialect oauth) has no bindings: these commands say so and exit 69 (unsupported). \
            Every admin command is recorded in the audit log with the acting OS user (`keymgr audit --event \
            admin.deviceRevoked`).

            Example:
              keymgr admin devices --user alice
              keymgr admin revoke --user alice --device-id 3f2a9c1e --reason stolen --yes
            """,
        subcommands: [Devices.self, RevokeDevice.self, Stale.self])

    @OptionGroup var globals: GlobalOptions

    /// The store and the configured server, with the admin service over them.
    static func service(_ globals: GlobalOptions, network: NetworkOptions, in context: CommandContext) throws -> AdminService {
        let manager = try globals.openManager(in: context)
        let connection = try ServerConnection.configured(in: manager, profile: network.profile, timeout: network.timeout, environment: context.environment)
        globals.console(in: context).detail("server \(connection.settings.baseURL.absoluteString) (realm \(connection.settings.realmPath))")
        return AdminService(manager: manager, connection: connection, home: globals.storeHome(in: context), logger: globals.logger(in: context))
    }

    /// Prints a listing as `admin devices --json` or a table, then fails (after the listing) if any user's failed.
    /// When no user could be listed, nothing is printed: the failure is reported as any command reports it
    /// (69 unreachable, 77 credential refused, …).
    static func printListing(_ listing: FleetListing, globals: GlobalOptions, wide: Bool, oneUser: Bool = false,
                             empty: String, in context: CommandContext) throws {
        let failure = listing.failure
        if let failure, failure.whole { throw failure.error }
        try globals.render(FleetListingOutput(bindings: listing.bindings, wide: wide, oneUser: oneUser, empty: empty), in: context)
        guard let failure else { return }
        for error in listing.errors {
            context.streams.error.write("keymgr: \(TextTable.printable(error.userId)): \(TextTable.printable(error.message)) (\(error.code.rawValue))\n")
        }
        throw FailureAfterReport(failure.error.code, failure.error.message)
    }

    /// `keymgr admin devices`.
    struct Devices: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "devices",
            abstract: "List a user's (or every known user's) bindings on the server.",
            usage: "keymgr admin devices (--user <id> | --all-known) [<options>]",
            discussion: """
                Shows each binding's device name, device id, kid (= uuid), creation and last access as the \
                server lists them, and whether it is this device (HERE). --all-known lists every user this \
                store knows, a few at a time. With --json: [{"userId", "uuid", "kid", "deviceId", \
                "deviceName", "createdAt", "lastAccessAt", "thisDevice"}]. If some users cannot be listed, \
                the others are printed and the command exits with the failure's status.

                Example:
                  keymgr admin devices --user alice
                  keymgr admin devices --all-known --json
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var table: TableOptions

        @Option(help: ArgumentHelp("The user whose bindings to list.", valueName: "id"),
                completion: .custom(StoreCompletion.users))
        var user: String?

        @Flag(help: "List the bindings of every user this store knows.")
        var allKnown = false

        @OptionGroup var network: NetworkOptions

        @OptionGroup var fleet: FleetOptions

        func validate() throws {
            guard (user == nil) != !allKnown else { throw ValidationError("give exactly one of --user ID and --all-known") }
        }

        func run(in context: CommandContext) throws {
            let service = try Admin.service(globals, network: network, in: context)
            let (user, single, concurrency) = (user, user != nil, fleet.concurrency)
            let progress = ProgressLine(in: context, enabled: !globals.quiet && !single, label: "listing")
            let listing: FleetListing
            do {
                defer { progress.clear() }
                listing = try AsyncBridge.wait {
                    try await service.devices(user: user, concurrency: concurrency) {
                        progress.show(done: $0, total: $1)
                    }
                }
            }
            try Admin.printListing(listing, globals: globals, wide: table.wide, oneUser: single,
                                   empty: single ? "the server lists no binding of \(listing.userIds.first ?? "")" : "the server lists no binding of the \(listing.users) known users", in: context)
        }
    }

    /// `keymgr admin stale`.
    struct Stale: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "stale",
            abstract: "List bindings the server has not seen used for N days.",
            usage: "keymgr admin stale --days <n> [<options>]",
            discussion: """
                Lists, for every user this store knows, the bindings whose last access on the server (else \
                their creation) is more than N days ago, in the `admin devices` table or JSON. Revoke one \
                with `keymgr admin revoke`.

                Example:
                  keymgr admin stale --days 90
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var table: TableOptions

        @Option(help: ArgumentHelp("Unused for at least this many days.", valueName: "n"))
        var days: Int

        @OptionGroup var network: NetworkOptions

        @OptionGroup var fleet: FleetOptions

        func validate() throws {
            guard (1...36_500).contains(days) else { throw ValidationError("--days must be from 1 to 36500") }
        }

        func run(in context: CommandContext) throws {
            let service = try Admin.service(globals, network: network, in: context)
            let (days, concurrency) = (days, fleet.concurrency)
            let progress = ProgressLine(in: context, enabled: !globals.quiet, label: "listing")
            let listing: FleetListing
            do {
                defer { progress.clear() }
                listing = try AsyncBridge.wait {
                    try await service.stale(days: days, concurrency: concurrency) { progress.show(done: $0, total: $1) }
                }
            }
            try Admin.printListing(listing, globals: globals, wide: table.wide,
                                   empty: "no binding of the \(listing.users) known users is unused for \(days) days", in: context)
        }
    }

    /// `keymgr admin revoke`.
    struct RevokeDevice: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke a user's device: its bindings on the server, and here if it is this one.",
            usage: "keymgr admin revoke --user <id> (--device <uuid> | --device-id <id>)\n       --reason <reason> [--yes] [<options>]",
            discussion: """
                Deletes the user's bindings of that device on the server (--device: one binding by its uuid; \
                --device-id: every binding of the user from that device); a binding already gone counts as \
                deleted. The device itself revokes its keys and wipes the user's tokens, DPoP key and client \
                registration at its next `keymgr sync`. When the device is this one, that happens now, and \
                the user's OAuth client is deleted at the server too (RFC 7592) if keymgr holds its \
                management credential. Running it again changes nothing and says so. On a terminal keymgr \
                asks first (--yes does not ask); without one it never asks. Audited as admin.deviceRevoked \
                with the OS user and the reason. With --json: {"userId", "deviceId", "thisDevice", \
                "deletedOnServer", "alreadyGone", "clientDeleted", "revokedHere", "tokenSetsWiped", \
                "registrationsWiped", "changed"}.

                Example:
                  keymgr admin revoke --user alice --device-id 3f2a9c1e --reason stolen --yes
                """)

        @OptionGroup var globals: GlobalOptions

        @Option(help: ArgumentHelp("The user whose device to revoke.", valueName: "id"),
                completion: .custom(StoreCompletion.users))
        var user: String

        @Option(help: ArgumentHelp("One binding, by its uuid (= kid; a unique prefix of 8 or more characters).", valueName: "uuid"))
        var device: String?

        @Option(help: ArgumentHelp("Every binding of the user from this device id (or a unique prefix of 8 or more characters).", valueName: "id"))
        var deviceId: String?

        @Option(help: ArgumentHelp("Why, for the audit log: stolen, lost, left or other.", valueName: "reason"))
        var reason: String

        @OptionGroup var network: NetworkOptions

        @OptionGroup var confirmation: ConfirmationOptions

        func validate() throws {
            guard (device == nil) != (deviceId == nil) else {
                throw ValidationError("say which device: give exactly one of --device UUID and --device-id ID")
            }
            if let text = device ?? deviceId, text.trimmingCharacters(in: .whitespaces).isEmpty {
                throw ValidationError("the device must not be empty")
            }
            guard DeviceRevocationReason(rawValue: reason) != nil else {
                throw ValidationError("--reason must be one of \(DeviceRevocationReason.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run(in context: CommandContext) throws {
            let service = try Admin.service(globals, network: network, in: context)
            let selector: DeviceSelector = device.map(DeviceSelector.binding) ?? .deviceId(deviceId ?? "")
            let (user, why, confirmation) = (user, DeviceRevocationReason(rawValue: reason) ?? .other, confirmation)
            let report = try AsyncBridge.wait {
                try await service.revokeDevice(user: user, selector: selector, reason: why) { plan in
                    try confirmation.confirm(Self.question(plan), in: context)
                }
            }
            try globals.render(DeviceRevocationOutput(report: report), in: context)
        }

        /// What the terminal is asked before anything changes.
        static func question(_ plan: DeviceRevocationPlan) -> String {
            var parts: [String] = []
            if !plan.bindings.isEmpty {
                parts.append("delete \(plan.bindings.count) binding\(plan.bindings.count == 1 ? "" : "s") of \(plan.userId) "
                    + "on the server (device \(plan.deviceName.map { "\"\($0)\" " } ?? "")\(plan.deviceId ?? "unknown"))")
            }
            if plan.thisDevice {
                parts.append("revoke \(plan.localKids.count) key\(plan.localKids.count == 1 ? "" : "s") of \(plan.userId) "
                    + "on THIS device and wipe the user's tokens and client registration")
            }
            let text = parts.joined(separator: ", and ")
            return TextTable.printable(text.prefix(1).uppercased() + text.dropFirst() + " (reason: \(plan.reason.rawValue))?")
        }

        /// What was done, for people: one line per kind of change, or that nothing changed.
        static func summary(_ report: DeviceRevocationReport) -> String {
            let plan = report.plan
            let device = "\(plan.selector.description) of \(plan.userId)"
            guard report.changedSomething else {
                var text = "nothing changed: the server holds no binding for \(device)"
                if !report.alreadyGone.isEmpty { text += " (\(report.alreadyGone.count) already gone)" }
                text += plan.thisDevice ? ", and this device holds no usable key or credential of the user"
                    : ": it was already revoked (see `keymgr admin devices --user \(plan.userId)`)"
                return TextTable.printable(text)
            }
            var lines: [String] = []
            for uuid in report.deletedOnServer { lines.append("deleted binding \(uuid) of \(plan.userId) on the server") }
            for uuid in report.alreadyGone { lines.append("binding \(uuid) was already gone from the server") }
            if report.clientDeleted { lines.append("deleted the OAuth client of \(plan.userId) at the server (RFC 7592)") }
            for kid in report.local.revokedHere { lines.append("revoked key \(kid) of \(plan.userId) on this device") }
            if report.local.tokenSetsWiped + report.local.registrationsWiped > 0 {
                lines.append("wiped \(report.local.tokenSetsWiped) token sets and \(report.local.registrationsWiped) "
                    + "client registrations of \(plan.userId) on this device")
            }
            if !plan.thisDevice && !report.deletedOnServer.isEmpty {
                lines.append("the device \(plan.deviceId ?? "") revokes its keys and wipes the user's tokens and "
                    + "registration at its next `keymgr sync`")
            }
            return lines.map(TextTable.printable).joined(separator: "\n")
        }
    }
}

/// `admin devices` and `admin stale`: the bindings' objects, or a table (one user's without the user column).
struct FleetListingOutput: DocumentOutput {
    let bindings: [FleetBinding]
    let wide: Bool
    let oneUser: Bool
    let empty: String

    var document: [FleetBindingJSON] { bindings.map(FleetBindingJSON.init) }

    func text(on console: Console) {
        let skip = oneUser ? 1 : 0
        let columns: [TableColumn] = [TableColumn("USER ID", .cut(min: 8)), TableColumn("DEVICE NAME"),
                                      TableColumn("DEVICE ID", .cut(min: 8)), .whole("KID"), .time("CREATED"),
                                      .time("LAST ACCESS"), .whole("HERE")]
        let rows = bindings.map {
            [$0.userId, HumanText.text($0.deviceName), HumanText.text($0.deviceId), HumanText.kid($0.kid, wide: wide),
             HumanText.time($0.createdAt), HumanText.time($0.lastAccessAt), $0.thisDevice ? "yes" : "-"].dropFirst(skip).map { $0 }
        }
        console.table(Array(columns.dropFirst(skip)), rows, empty: empty, wide: wide)
    }
}

/// `admin revoke`: `DeviceRevocationJSON`, or what was done, one line per change.
struct DeviceRevocationOutput: DocumentOutput {
    let report: DeviceRevocationReport

    var document: DeviceRevocationJSON { DeviceRevocationJSON(report) }

    func text(on console: Console) { console.answer(Admin.RevokeDevice.summary(report)) }
}
