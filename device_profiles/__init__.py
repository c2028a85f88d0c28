"""Device profiles are data: one TOML file per profile (this file only makes the folder a package)."""
