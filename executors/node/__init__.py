"""What runs on every node: apply (observe → diff → apply), the firewall, the provisioners,
verify. Kept free of imports so the no-op check of `mesh apply` stays light."""
