import ArgumentParser
import Foundation
import KeyManager

/// `keymgr doctor [--json]`: one line per check, each naming what is wrong and the one thing to do.
struct DoctorCommand: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check this device's store, master key, disk, sync and TPM; say what is wrong and what to do.",
        discussion: """
            One line per check: `ok` or `FAIL`, its name (store.files, store.schema, store.integrity, masterKey, \
            disk, sync, tpm), what was found and, for a failure, the one thing to do. Writes nothing; sends the TPM \
            only a capability query (nothing dictionary-attack protected), so it is safe on a timer. Exit 0 when \
            every check holds, 1 otherwise. With --json (for fleet tools): \
            {"ok", "checks": [{"name", "ok", "message", "fix"}]}.

            Example:
              keymgr doctor
              keymgr doctor --json
            """)

    @OptionGroup var globals: GlobalOptions

    func run() throws {
        let checks = Doctor.run(home: globals.storeHome, environment: ProcessEnvironment.variables)
        try globals.render(DoctorOutput(checks: checks))
        if checks.contains(where: { !$0.ok }) { throw ExitCode.failure }
    }
}

/// `doctor`: `{"ok","checks":[…]}`, or one line per check.
struct DoctorOutput: DocumentOutput {
    let checks: [DoctorCheck]

    struct Document: Encodable {
        struct Check: Encodable {
            let name: String
            let ok: Bool
            let message: String
            let fix: String?
        }
        let ok: Bool
        let checks: [Check]
    }

    var document: Document {
        Document(ok: checks.allSatisfy(\.ok),
                 checks: checks.map { Document.Check(name: $0.name, ok: $0.ok, message: $0.message, fix: $0.fix) })
    }

    func text(on console: Console) {
        let width = checks.map(\.name.count).max() ?? 0
        console.answer(checks.map { check in
            let line = (check.ok ? "ok    " : "FAIL  ") + check.name + String(repeating: " ", count: width - check.name.count + 2)
                + TextTable.printable(check.message)
            return check.fix.map { line + ": " + TextTable.printable($0) } ?? line
        }.joined(separator: "\n"))
    }
}
