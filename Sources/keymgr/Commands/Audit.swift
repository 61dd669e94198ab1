import ArgumentParser
import Foundation
import KeyManager

/// `keymgr audit`: the hash-chained audit log. Without a subcommand it lists entries (`audit list`).
struct Audit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Show the audit log, or verify the whole store: every row's MAC, each table's set of rows, the audit chain.",
        discussion: """
            `keymgr audit [options]` is `keymgr audit list [options]`.

            Example:
              keymgr audit --user alice --since 2026-11-01 --format csv
              keymgr audit verify
            """,
        subcommands: [Show.self, Verify.self],
        defaultSubcommand: Show.self)

    @OptionGroup var globals: GlobalOptions

    /// How `audit list` prints entries.
    enum Format: String, ExpressibleByArgument, CaseIterable {
        case table, json, csv
    }

    /// `keymgr audit list`: entries oldest first, filtered.
    struct Show: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List audit entries, oldest first.",
            usage: "keymgr audit [list] [<options>] [--user <id>] [--event <name>]",
            discussion: """
                --format json (or --json) prints [{"seq", "at", "event", "userId", "kid", "actor", "details", "hash", "prevHash"}]; \
                csv prints the same fields under a header line. `actor` is the OS user who ran keymgr.

                Example:
                  keymgr audit --user alice --event key.revoked --since 2026-11-01T00:00:00Z
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var table: TableOptions

        @Option(help: ArgumentHelp("Only entries about this user.", valueName: "id"))
        var user: String?

        @Option(help: ArgumentHelp("Only entries at or after this time (ISO 8601 UTC, or a date).", valueName: "iso8601"))
        var since: String?

        @Option(help: ArgumentHelp("Only entries of this event, e.g. key.bound.", valueName: "name"))
        var event: String?

        @Option(help: "How to print the entries.")
        var format: Format?

        func validate() throws {
            if let since, ISOTime.date(from: since) == nil {
                throw ValidationError("--since needs an ISO 8601 UTC time such as 2026-11-23T10:00:00Z or a date such as 2026-11-23")
            }
            if globals.json, let format, format != .json {
                throw ValidationError("--json prints JSON: drop it or drop --format \(format.rawValue)")
            }
        }

        func run() throws {
            let manager = try globals.openManager(readOnly: true)
            let query = AuditFilter(userId: try manager.resolveUser(user), since: since.flatMap(ISOTime.date(from:)), event: event)
            let entries = try manager.auditEntries(query)
            let console = globals.console
            switch globals.json ? .json : (format ?? .table) {
            case .json:
                console.answer(json: entries.map(AuditEntryJSON.init))
            case .csv:
                var text = "seq,at,event,userId,kid,actor,details,hash,prevHash\n"
                for entry in entries {
                    text += [String(entry.seq), entry.at, entry.event, entry.userId ?? "", entry.kid ?? "", entry.actor,
                             entry.details.canonicalJSON(), entry.hash, entry.prevHash].map(Self.csvField).joined(separator: ",")
                    text += "\n"
                }
                console.answer(text)
            case .table:
                // Details are cut in the table; --json and --format csv show them whole.
                let wide = table.wide
                console.table(["SEQ", "AT", "EVENT", "USER ID", "KID", "ACTOR", "DETAILS"],
                              entries.map { [String($0.seq), HumanText.time(ISOTime.date(from: $0.at)), $0.event,
                                             HumanText.text($0.userId), HumanText.kid($0.kid, wide: wide), $0.actor,
                                             $0.details.canonicalJSON()] },
                              empty: "no matching audit entries", wide: wide, keepWhole: [0, 1, 4])
            }
        }

        /// RFC 4180: quoted when it holds a comma, quote or line break; quotes doubled.
        static func csvField(_ text: String) -> String {
            guard text.contains(where: { $0 == "," || $0 == "\"" || $0.isNewline }) else { return text }
            return "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\""
        }
    }

    /// `keymgr audit verify`: checks the whole store, the audit chain included.
    struct Verify: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Check the whole store: every row, each table's set of rows, and the audit chain.",
            discussion: """
                Checks every row of every table keymgr trusts against its MAC under the master key, each table's set \
                of rows against the one the store committed (so a deleted row, or a deleted row put back, shows), \
                and recomputes the audit chain. Exits 0 when everything holds and 1 when something does not, naming \
                each table and row, and the first audit entry that fails. This is the command a `tampered` error \
                points to. With --json: {"intact", "checked", "firstBadSeq", "reason", "rowsChecked", \
                "rowIssues": [{"table", "row", "reason"}]}.

                Example:
                  keymgr audit verify --json
                """)

        @OptionGroup var globals: GlobalOptions

        func run() throws {
            let report = try globals.openManager(readOnly: true).verifyAudit()
            let console = globals.console
            if globals.json { console.answer(json: AuditVerificationJSON(report)) }
            if report.isIntact {
                if !globals.json {
                    console.answer("store intact: \(report.rowsChecked) rows and their tables' row sets checked; "
                        + "audit log intact: \(report.checked) entries checked")
                }
                return
            }
            for issue in report.rowIssues {
                StandardStream.error.write("keymgr: tampered: table \(issue.table)"
                    + (issue.row.map { ", row \(TextTable.printable($0))" } ?? "") + ": \(issue.reason)\n")
            }
            if let bad = report.firstBad {
                StandardStream.error.write(
                    "keymgr: the audit log is broken at entry \(bad.seq): \(bad.reason) (\(report.checked) entries before it verified)\n")
            } else {
                StandardStream.error.write("keymgr: the audit log itself is intact (\(report.checked) entries); restore the store "
                    + "from a backup, or find what changed from the rows named above\n")
            }
            throw ExitCode.failure
        }
    }
}
