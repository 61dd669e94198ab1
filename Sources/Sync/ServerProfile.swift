import Foundation
import KeyManager
import Storage

/// A configured identity server, ready to talk to: its settings and the admin credential read from its file.
public struct ServerProfile: Sendable {
    public enum Dialect: String, Sendable, CaseIterable {
        case pingam, curity
    }

    public var name: String
    public var dialect: Dialect
    public var baseURL: URL
    public var realmPath: String
    public var credentialFile: String?
    public var credentialHeader: String

    public init(name: String = "default", dialect: Dialect, baseURL: URL, realmPath: String = "/realms/root",
                credentialFile: String? = nil, credentialHeader: String = "Authorization") {
        self.name = name
        self.dialect = dialect
        self.baseURL = baseURL
        self.realmPath = realmPath
        self.credentialFile = credentialFile
        self.credentialHeader = credentialHeader
    }

    init(_ record: ServerRecord) throws {
        guard let dialect = Dialect(rawValue: record.dialect), let url = URL(string: record.baseUrl) else {
            throw KeyManagerError(.config, "the server profile \(record.name) is damaged: run `keymgr server set` again")
        }
        self.init(name: record.name, dialect: dialect, baseURL: url, realmPath: record.realmPath,
                  credentialFile: record.credentialFile, credentialHeader: record.credentialHeader)
    }

    /// Where the admin credential comes from: the profile's file, else `$CREDENTIALS_DIRECTORY/keymgr.admin`.
    public func credentialPath(environment: [String: String]) -> String? {
        if let credentialFile { return credentialFile }
        if let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty {
            return URL(fileURLWithPath: directory).appendingPathComponent("keymgr.admin").path
        }
        return nil
    }

    /// The admin credential as a request header: `Authorization: Bearer <token>`, or `<NAME>: <token>`.
    public func adminHeader(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> (String, String) {
        guard let path = credentialPath(environment: environment) else {
            throw KeyManagerError(.config, "no admin credential: give `keymgr server set --credential-file F`, "
                + "or run under systemd with LoadCredentialEncrypted=keymgr.admin")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw KeyManagerError(.config, "cannot read the admin credential file \(path): check it exists and is readable")
        }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !token.isEmpty, !token.contains("\n") else {
            throw KeyManagerError(.config, "the admin credential file \(path) must hold one token on one line")
        }
        if credentialHeader.caseInsensitiveCompare("Authorization") == .orderedSame {
            return ("Authorization", "Bearer \(token)")
        }
        return (credentialHeader, token)
    }

    /// `{base}/json{realmPath}` with no doubled slashes.
    var jsonBase: String {
        var base = baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        var realm = realmPath.hasPrefix("/") ? realmPath : "/" + realmPath
        while realm.hasSuffix("/") && realm.count > 1 { realm.removeLast() }
        return base + "/json" + (realm == "/" ? "" : realm)
    }
}

extension KeyManager {
    /// The configured server profile, or `config` when none is set.
    public func serverProfile(name: String = "default") throws -> ServerProfile {
        guard let record = try serverSettings(name: name) else {
            throw KeyManagerError(.config, "no server is configured: run `keymgr server set --dialect pingam --base-url URL --credential-file F`")
        }
        return try ServerProfile(record)
    }
}
