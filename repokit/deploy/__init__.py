"""What a cluster needs to run ``repokit serve``: manifests and a container build file."""
