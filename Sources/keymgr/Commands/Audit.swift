import ArgumentParser
import Foundation
import KeyManager

/// `keymgr audit`: the hash-chained audit log. Without a subcommand it lists entries as `audit list` does; its
/// options are declared here too (not through a default subcommand), so shell completion of `audit --event`
/// completes event names rather than offering subcommands.
struct Audit: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Show the audit log, or verify the whole store: every row's MAC, each table's set of rows, the audit chain.",
        usage: "keymgr audit [list] [<options>] [-n <n>] | keymgr audit verify",
        discussion: """
            `keymgr audit [options]` is `keymgr audit list [options]` (see `keymgr audit list --help`).

            Example:
              keymgr audit -n 20 --reverse
              keymgr audit --user alice --since 2026-11-01 --format csv
              keymgr audit verify
            """,
        subcommands: [Show.self, Verify.self, Archive.self, ClearTampering.self])

    @OptionGroup var globals: GlobalOptions

    @OptionGroup var listing: Listing

    func validate() throws { try listing.check(globals) }

    func run(in context: CommandContext) throws { try listing.run(globals, in: context) }

    /// How `audit list` prints entries.
    enum Format: String, ExpressibleByArgument, CaseIterable {
        case table, json, csv
    }

    /// `keymgr audit list`: entries oldest first (or the newest N, or newest first), filtered, printed as they are read.
    struct Show: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List audit entries, oldest first.",
            usage: "keymgr audit [list] [<options>] [-n <n>] [--reverse] [--event <name>]",
            discussion: """
                --format json (or --json) prints [{"seq", "at", "event", "userId", "owner", "kid", "actor", "details", "hash", "prevHash"}]; \
                csv prints the same fields under a header line. `actor` is the OS user who ran keymgr. The table \
                shows details as name=value pairs. Entries are printed as they are read, so a log of any length \
                takes the same memory; -n reads only the newest entries, however long the log.

                Example:
                  keymgr audit -n 20
                  keymgr audit --user alice --event key.revoked --since 2026-11-01T00:00:00Z
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var listing: Listing

        func validate() throws { try listing.check(globals) }

        func run(in context: CommandContext) throws { try listing.run(globals, in: context) }
    }

    /// What `audit` and `audit list` take and do.
    struct Listing: ParsableArguments {
        @OptionGroup var table: TableOptions

        @Option(name: [.customShort("n"), .customLong("newest")],
                help: ArgumentHelp("Only the newest N matching entries.", valueName: "n"))
        var newest: Int?

        @Flag(help: "Newest first.")
        var reverse = false

        @Option(help: ArgumentHelp("Only entries about this user.", valueName: "id"),
                completion: .custom(StoreCompletion.users))
        var user: String?

        @Option(help: ArgumentHelp("Only entries at or after this time (ISO 8601 UTC, or a date).", valueName: "iso8601"))
        var since: String?

        @Option(help: ArgumentHelp("Only entries of this event, e.g. key.bound.", valueName: "name"),
                completion: .custom(StoreCompletion.auditEvents))
        var event: String?

        @Option(help: "How to print the entries.")
        var format: Format?

        func check(_ globals: GlobalOptions) throws {
            if let since, ISOTime.date(from: since) == nil {
                throw ValidationError("--since needs an ISO 8601 UTC time such as 2026-11-23T10:00:00Z or a date such as 2026-11-23")
            }
            if let newest, newest < 1 { throw ValidationError("-n needs a positive number of entries") }
            try globals.checkFormat(format?.rawValue)
        }

        func run(_ globals: GlobalOptions, in context: CommandContext) throws {
            let manager = try globals.openManager(in: context, readOnly: true)
            let filter = AuditFilter(userId: try manager.resolveUser(user), since: since.flatMap(ISOTime.date(from:)),
                                     event: event, newest: newest, newestFirst: reverse)
            try globals.render(AuditEntriesOutput(manager: manager, filter: filter, format: format ?? .table,
                                                  wide: table.wide, quiet: globals.quiet), in: context)
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
            usage: "keymgr audit verify [--journal <file> | --input <file>] [--json]",
            discussion: """
                Checks every row of every table keymgr trusts against its MAC under the master key, each table's set \
                of rows against the one the store committed (so a deleted row, or a deleted row put back, shows), \
                and recomputes the audit chain. Exits 0 when everything holds and 1 when something does not, naming \
                each table and row, and the first audit entry that fails. This is the command a `tampered` error \
                points to. With --json: {"intact", "checked", "firstBadSeq", "reason", "rowsChecked", \
                "rowIssues": [{"table", "row", "reason"}]}.

                --journal FILE checks, offline and without the store, the copy of the log every keymgr sends to the \
                journal, as `journalctl -o json` exports it (e.g. on a central log server): each store's SHA-256 \
                chain is recomputed and every missing, altered or replaced entry is named. With --json: \
                {"intact", "chains": [{"deviceId", "firstSeq", "lastSeq", "entries", "problems": [{"seq", "reason"}]}]}.

                --input FILE checks an archive `keymgr audit archive` wrote, the same way, from where its header \
                says the previous archive ended.

                Example:
                  keymgr audit verify --json
                  keymgr audit verify --input /var/backups/keymgr/audit-2026-09.jsonl
                  keymgr audit verify --journal keymgr.json
                """)

        @OptionGroup var globals: GlobalOptions

        @Option(help: ArgumentHelp("Check a `journalctl -o json` export of keymgr's journal entries instead of the store.",
                                   valueName: "file"))
        var journal: String?

        @Option(help: ArgumentHelp("Check an archive `keymgr audit archive` wrote instead of the store.", valueName: "file"))
        var input: String?

        func validate() throws {
            if journal != nil && input != nil { throw ValidationError("give --journal or --input, not both") }
        }

        func run(in context: CommandContext) throws {
            if let input {
                let text = try NamedFile.open(input, option: "--input", access: .read, for: context.request).text(limit: NamedFile.auditExportLimit)
                return try Audit.verifyCopy(try KeyManager.verifyArchive(text), globals, in: context)
            }
            if let journal {
                let text = try NamedFile.open(journal, option: "--journal", access: .read, for: context.request).text(limit: NamedFile.auditExportLimit)
                return try Audit.verifyCopy(try KeyManager.verifyJournalExport(text), globals, in: context)
            }
            let report = try globals.openManager(in: context, readOnly: true).verifyAudit()
            try globals.render(AuditVerificationOutput(report: report), in: context)
            if report.isIntact { return }
            for issue in report.rowIssues {
                context.streams.error.write("keymgr: tampered: table \(issue.table)"
                    + (issue.row.map { ", row \(TextTable.printable($0))" } ?? "") + ": \(issue.reason)\n")
            }
            if let bad = report.firstBad {
                context.streams.error.write(
                    "keymgr: the audit log is broken at entry \(bad.seq): \(bad.reason) (\(report.checked) entries before it verified)\n")
            } else {
                context.streams.error.write("keymgr: the audit log itself is intact (\(report.checked) entries); restore the store "
                    + "from a backup, or find what changed from the rows named above\n")
            }
            throw ExitCode.failure
        }
    }
}

extension Audit {
    /// `keymgr audit clear-tampering`: the administrator's way out once a tampering finding was dealt with.
    struct ClearTampering: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "clear-tampering",
            abstract: "Clear the recorded tampering finding once `audit verify` is clean.",
            discussion: """
                The first command that finds a row changed outside keymgr records it (what, when, whose row) in \
                the device row; from then on `sign`, `token print`, `dpop proof` and `--reveal` refuse for that \
                user (for every user when the row names none) with exit 1, code tampered. Once the store verifies \
                again (restored from a backup, or the row repaired), this clears the finding, audited as \
                store.tamperingCleared. It refuses (exit 1, tampered) while `keymgr audit verify` does not hold. \
                With --json: {"cleared", "what", "at", "userId"} (null members when there was nothing to clear).

                Example:
                  keymgr audit verify && keymgr audit clear-tampering
                """)

        @OptionGroup var globals: GlobalOptions

        func run(in context: CommandContext) throws {
            let cleared = try globals.openManager(in: context).clearTampering()
            try globals.render(ClearedTamperingOutput(finding: cleared), in: context)
        }
    }
}

/// `audit clear-tampering`.
struct ClearedTamperingOutput: DocumentOutput {
    struct Document: Encodable {
        let cleared: Bool
        @Nullable var what: String?
        @Nullable var at: Date?
        @Nullable var userId: String?
    }

    let finding: TamperingFinding?

    var document: Document {
        Document(cleared: finding != nil, what: finding?.what, at: finding?.at, userId: finding?.userId)
    }

    func text(on console: Console) {
        guard let finding else {
            console.confirm("no tampering finding was recorded: nothing to clear")
            return
        }
        console.confirm("cleared the tampering finding of \(HumanText.time(finding.at))"
            + (finding.userId.map { " (user \(TextTable.printable($0)))" } ?? " (every user)"))
    }
}

/// `audit list`: the entries as JSON (`--json` or `--format json`), CSV or a table, each entry written as it is read
/// through a buffer flushed every 64 KiB: no array of the whole log.
struct AuditEntriesOutput: CommandOutput {
    let manager: KeyManager
    let filter: AuditFilter
    let format: Audit.Format
    let wide: Bool
    let quiet: Bool

    func json(on console: Console) throws {
        var out = JSONBytes(capacity: 1 << 17, output: console.output)
        out.raw("[")
        var first = true
        try manager.forEachAuditEntry(filter) { entry in
            if !first { out.raw(",") }
            first = false
            out.auditEntry(entry)
            out.flush()
        }
        out.raw("]\n")
        out.flush(over: 0)
    }

    func text(on console: Console) throws {
        var out = JSONBytes(capacity: 1 << 17, output: console.output)
        switch format {
        case .json:
            return try json(on: console)
        case .csv:
            out.text("seq,at,event,userId,kid,actor,details,hash,prevHash\n")
            try manager.forEachAuditEntry(filter) { entry in
                out.text([String(entry.seq), entry.at, entry.event, entry.userId ?? "", entry.kid ?? "", entry.actor,
                          entry.details.canonicalJSON(), entry.hash, entry.prevHash].map(Audit.Listing.csvField).joined(separator: ","))
                out.text("\n")
                out.flush()
            }
        case .table:
            var table = StreamedTable(
                columns: [.whole("SEQ"), .time("AT"), .whole("EVENT"), TableColumn("USER ID", .cut(min: 8)), .whole("KID"),
                          TableColumn("ACTOR", .cut(min: 6)), TableColumn("DETAILS", .cut(min: 12))],
                maxWidth: wide ? nil : console.tableWidth)
            try manager.forEachAuditEntry(filter) { entry in
                table.add([String(entry.seq), HumanText.time(ISOTime.date(from: entry.at)), entry.event, HumanText.text(entry.userId),
                           HumanText.kid(entry.kid, wide: wide), entry.actor, HumanText.details(entry.details)], into: &out)
            }
            guard table.finish(into: &out) else {
                if !quiet { console.error.write("no matching audit entries\n") }
                return
            }
        }
        out.flush(over: 0)
    }
}

/// `audit verify`: `AuditVerificationJSON` (whether intact or not), or for an intact store one line (what is broken
/// goes to stderr either way).
struct AuditVerificationOutput: DocumentOutput {
    let report: AuditVerification

    var document: AuditVerificationJSON { AuditVerificationJSON(report) }

    func text(on console: Console) {
        guard report.isIntact else { return }
        console.answer("store intact: \(report.rowsChecked) rows and their tables' row sets checked; "
            + "audit log intact: \(report.checked) entries checked")
    }
}

extension Audit {
    /// Prints a checked copy of the log (journal export or archive) and exits 1 when it does not hold.
    static func verifyCopy(_ report: AuditCopyReport, _ globals: GlobalOptions, in context: CommandContext) throws {
        try globals.render(AuditCopyOutput(report: report), in: context)
        for chain in report.chains {
            for problem in chain.problems {
                context.streams.error.write("keymgr: \(chain.deviceId.map { "store \($0): " } ?? "")\(TextTable.printable(problem.reason))\n")
            }
        }
        if !report.isIntact { throw ExitCode.failure }
    }
}

/// `audit verify --journal`: the chains found and what is wrong with them.
struct AuditCopyOutput: DocumentOutput {
    let report: AuditCopyReport

    struct Document: Encodable {
        struct Problem: Encodable { let seq: Int64; let reason: String }
        struct Chain: Encodable {
            let deviceId: String?
            let firstSeq: Int64
            let lastSeq: Int64
            let entries: Int
            let problems: [Problem]
        }
        let intact: Bool
        let chains: [Chain]
    }

    var document: Document {
        Document(intact: report.isIntact, chains: report.chains.map { chain in
            Document.Chain(deviceId: chain.deviceId, firstSeq: chain.firstSeq, lastSeq: chain.lastSeq, entries: chain.entries,
                           problems: chain.problems.map { Document.Problem(seq: $0.seq, reason: $0.reason) })
        })
    }

    func text(on console: Console) {
        guard !report.chains.isEmpty else {
            console.answer("no keymgr entries in the copy")
            return
        }
        console.answer(report.chains.map { chain in
            "\(chain.deviceId.map { "store \($0)" } ?? "entries"): \(chain.entries) entries, \(chain.firstSeq) to \(chain.lastSeq): "
                + (chain.problems.isEmpty ? "chain intact" : "\(chain.problems.count) problem(s)")
        }.joined(separator: "\n"))
    }
}
