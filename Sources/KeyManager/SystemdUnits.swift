import Foundation
import Glibc

/// The state of systemd units, asked of `systemctl` when systemd runs this system (sd_booted: /run/systemd/system).
package enum SystemdUnits {
    /// The units of `units` that are failed; nil when systemd does not run here or cannot be asked.
    package static func failed(_ units: [String]) -> [String]? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: "/run/systemd/system", isDirectory: &isDirectory), isDirectory.boolValue,
              let systemctl = ["/usr/bin/systemctl", "/bin/systemctl"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else { return nil }
        return units.filter { unit in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: systemctl)
            process.arguments = ["is-failed", "--quiet", unit]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { return false }
            process.waitUntilExit()
            return process.terminationStatus == 0
        }
    }
}

/// An installed unit file, read as systemd finds it: the first `NAME` in the unit search path ($SYSTEMD_UNIT_PATH
/// when set, as systemd's own tools honour it; else /etc/systemd/system, /run/systemd/system,
/// /usr/local/lib/systemd/system, /usr/lib/systemd/system, /lib/systemd/system). Drop-ins (`NAME.d/*.conf`) are
/// not read: a credential moved by a drop-in is seen through the agent only.
package struct SystemdUnitFile: Sendable {
    package let path: String
    /// Each `Key=value` of the file, in order (every section; comments and blank lines skipped).
    let settings: [(key: String, value: String)]

    package static func installed(_ name: String, environment: [String: String]) -> SystemdUnitFile? {
        let search = environment["SYSTEMD_UNIT_PATH"].map { $0.split(separator: ":").map(String.init) }
            ?? ["/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
                "/lib/systemd/system"]
        for directory in search where !directory.isEmpty {
            let path = directory + "/" + name
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { continue }
            return SystemdUnitFile(path: path, text: text)
        }
        return nil
    }

    init(path: String, text: String) {
        self.path = path
        settings = text.split(whereSeparator: \.isNewline).compactMap { line in
            let line = line.trimmingCharacters(in: .whitespaces)
            guard !line.isEmpty, !line.hasPrefix("#"), !line.hasPrefix(";"), !line.hasPrefix("["),
                  let equals = line.firstIndex(of: "=") else { return nil }
            return (line[..<equals].trimmingCharacters(in: .whitespaces),
                    line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces))
        }
    }

    package func values(_ key: String) -> [String] { settings.filter { $0.key == key }.map(\.value) }

    /// The store the unit's agent serves: `--home DIR` on its `ExecStart=`, else /var/lib/ + its `StateDirectory=`.
    package var home: String? {
        for line in values("ExecStart") {
            let words = line.split(separator: " ").map(String.init)
            if let at = words.firstIndex(of: "--home"), at + 1 < words.count { return words[at + 1] }
            if let word = words.first(where: { $0.hasPrefix("--home=") }) { return String(word.dropFirst("--home=".count)) }
        }
        return values("StateDirectory").last.flatMap { $0.split(separator: " ").first }.map { "/var/lib/" + $0 }
    }

    /// Where systemd loads the credential `name` from for this unit: the directive (`LoadCredentialEncrypted` or
    /// `LoadCredential`) and the source file. A source given as `NAME:PATH` is that path; a bare `NAME` is searched
    /// in the credential stores (/etc/credstore, /run/credstore, /usr/lib/credstore, or their `.encrypted` twins
    /// for an encrypted one): the first that exists, else the first of them (where it would be put).
    package func credential(_ name: String) -> (directive: String, source: String)? {
        for directive in ["LoadCredentialEncrypted", "LoadCredential"] {
            for value in values(directive) {
                let parts = value.split(separator: ":", maxSplits: 1).map(String.init)
                guard parts.first == name else { continue }
                if parts.count == 2, parts[1].hasPrefix("/") { return (directive, parts[1]) }
                let suffix = directive == "LoadCredentialEncrypted" ? ".encrypted" : ""
                let candidates = ["/etc/credstore", "/run/credstore", "/usr/lib/credstore"].map { "\($0)\(suffix)/\(name)" }
                return (directive, candidates.first { FileManager.default.fileExists(atPath: $0) } ?? candidates[0])
            }
        }
        return nil
    }
}
