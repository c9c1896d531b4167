"""Tests of the Helm chart (deploy/helm/dra-gpu) as Helm renders it."""
