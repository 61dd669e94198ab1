import ArgumentParser
import Foundation
import KeyManager

extension Audit {
    /// `keymgr audit archive --before DATE --output FILE`: bounded logs (an administrator's act, audited).
    struct Archive: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "archive",
            abstract: "Move the audit entries written before a date to a file, keeping the chain verifiable.",
            discussion: """
                Checks the whole audit chain, writes the entries before --before with their hashes and MACs to a new \
                file (mode 0600; `keymgr audit verify --input FILE` checks it offline), then removes them from the \
                store in one transaction, leaving the newest of them as the log's base (MAC'd), so `audit verify` \
                still verifies the rest from there, and records `audit.archived`. Each archive starts where the \
                previous one ended. Needs the whole store in scope (an administrator under the agent). Nothing \
                before the date: nothing is written (exit 0). With --json: {"entries", "firstSeq", "lastSeq", \
                "lastHash", "output"}.

                Example:
                  keymgr audit archive --before 2026-10-01 --output /var/backups/keymgr/audit-2026-09.jsonl
                """)

        @OptionGroup var globals: GlobalOptions

        @Option(help: ArgumentHelp("Archive the entries written before this ISO 8601 UTC time or date.", valueName: "date"))
        var before: String

        @Option(help: ArgumentHelp("The archive file to create (it must not exist).", valueName: "file"))
        var output: String

        func validate() throws {
            if ISOTime.date(from: before) == nil {
                throw ValidationError("--before needs an ISO 8601 UTC time such as 2026-11-23T10:00:00Z or a date such as 2026-11-23")
            }
        }

        func run(in context: CommandContext) throws {
            guard let date = ISOTime.date(from: before) else { throw ValidationError("--before needs an ISO 8601 time") }
            // Through the agent a relative name is the caller's (the client created the file in their working
            // directory): it is shown as given.
            let path = output.hasPrefix("/") || !context.request.isServed
                ? URL(fileURLWithPath: output).standardizedFileURL.path : output
            let manager = try globals.openManager(in: context)
            let file = try NamedFile.open(output, option: "--output", access: .create, for: context.request)
            defer { file.discardIfUnused() }
            let summary = try manager.archiveAudit(before: date, to: file.descriptor, name: path)
            if let summary {
                globals.console(in: context).confirm("archived \(summary.entries) audit entries (\(summary.firstSeq) to \(summary.lastSeq)) "
                    + "to \(path); the log now continues from entry \(summary.lastSeq)")
            } else {
                globals.console(in: context).confirm("no audit entries before \(before): nothing archived")
            }
            try globals.render(AuditArchiveOutput(summary: summary, output: path), in: context)
        }
    }
}

/// `audit archive`: the summary (`--json`), or nothing more than the confirmation.
struct AuditArchiveOutput: DocumentOutput {
    let summary: AuditArchiveSummary?
    let output: String

    struct Document: Encodable {
        let entries: Int
        let firstSeq: Int64?
        let lastSeq: Int64?
        let lastHash: String?
        let output: String?
    }

    var document: Document {
        Document(entries: summary?.entries ?? 0, firstSeq: summary?.firstSeq, lastSeq: summary?.lastSeq,
                 lastHash: summary?.lastHash, output: summary == nil ? nil : output)
    }

    func text(on console: Console) {}
}
