"""The postgres provider and the app that consumes it, as the integration tests write them.

Templates for `str.format` with `repository` (the image's repository), `tag` and `tmp` (where
the provider's state lives); braces of YAML flow mappings are doubled. One copy, used by the
single-node admin rotation, the fleet rotation and the three-namespace fleet.
"""

PROVISIONS = """\
postgres-database:
  scope: node
  grant: database+login
  keys: [host, port, database, user, password, url]
  url: "postgres://{user}@{host}:{port}/{database}"
"""

POSTGRES = """\
name: postgres
artifacts:
  postgres: {{repository: {repository}, tag: "{tag}"}}
listens:
  postgres: {{port: 5432}}
provides:
  - {{provision: postgres-database, listen: postgres, admin: admin}}
secrets: [admin]
state:
  data: {{path: {tmp}/pgdata, owner: "999:999", mode: "0700"}}
containers:
  - name: server
    artifact: postgres
    env:
      POSTGRES_USER: postgres
      POSTGRES_PASSWORD: "${{self.admin.password}}"
      PGDATA: /var/lib/postgresql/data
    mounts: [{{state: data, target: /var/lib/postgresql/data}}]
    health:
      command: [pg_isready, --username, postgres, --host, 127.0.0.1]
      timeout: 180
"""

APP = """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
listens:
  http: {{port: 8080}}
requires:
  - {{as: db, provision: postgres-database}}
containers:
  - name: web
    artifact: image
    env:
      DB_HOST: "${{db.host}}"
      DB_PORT: "${{db.port}}"
      DB_USER: "${{db.user}}"
      DB_PASSWORD: "${{db.password}}"
    health: {{http: {{listen: http, path: /cgi-bin/env}}}}
"""
